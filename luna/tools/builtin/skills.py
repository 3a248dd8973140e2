"""Skill tools: ``load_skill`` (levels 2 and 3 of progressive disclosure) and ``save_skill``.

Level 1, every enabled skill's name and description, is in the session's head
(``luna.agent.head``). ``load_skill {"name"}`` returns the body of its SKILL.md, the folder
where its files are (read-only for ``read_file`` and ``bash``, at the same path) and the list
of its files; ``load_skill {"name", "path"}`` returns one of those files.

Invariants:
- A skill's body comes from the owner's own disk (or was approved by the owner in full), so
  it is a trusted result: instructions, neither shaped nor wrapped as untrusted. A file read
  with ``path``, and anything a skill's script prints, is an ordinary (untrusted) result.
- A ``path`` is relative to the skill's folder, without ``..``, and must stay inside it after
  symlinks are resolved (``folder.check_relative``).
- A skill with ``allowed-tools`` narrows what the rest of the turn may call, never widens it:
  its list (mapped to Luna's tool names) intersects what the turn could already call.
- ``save_skill`` asks the owner (level ``ask``: never in an unattended scheduled turn) and
  never replaces a skill the owner keeps (``luna.skills.learned``).
- The library is ``reg.skills``, made here with the registry.
"""

from __future__ import annotations

import asyncio

from luna import observe
from luna.config import Config
from luna.errors import SkillError, ToolError, did_you_mean
from luna.messages import ToolResult
from luna.skills import learned
from luna.skills.folder import Problem, Skill, check_relative, current_body
from luna.skills.library import SkillLibrary
from luna.tools.registry import ToolContext, ToolRegistry

MAX_LISTED_FILES = 100
MAX_FILE_BYTES = 60_000
# allowed-tools names written for other agents (Claude Code's) -> Luna's tools.
TOOL_ALIASES = {
    "bash": ("bash",),
    "read": ("read_file",),
    "write": ("write_file",),
    "edit": ("write_file",),
    "multiedit": ("write_file",),
    "glob": ("list_directory",),
    "ls": ("list_directory",),
    "grep": ("bash",),
    "webfetch": ("web_fetch",),
    "websearch": ("web_search",),
    "task": ("delegate",),
}


def register(reg: ToolRegistry, cfg: Config) -> None:
    if not cfg.skills.enabled:
        return
    library = SkillLibrary(cfg)
    reg.skills = library

    @reg.tool(level="allow")
    async def load_skill(name: str, path: str = "", *, ctx: ToolContext) -> ToolResult:
        """Load a skill from the list of skills: its instructions, or one of its files.

        Args:
            name: The skill's name, as listed.
            path: A file of the skill, relative to its folder (e.g. references/guide.md);
                leave empty for the skill's instructions.
        """
        skill = await asyncio.to_thread(_find, library, name)
        if path:
            text = await asyncio.to_thread(_read_file, skill, path)
            return ToolResult(text)
        body = await asyncio.to_thread(_read_body, skill)
        note = _narrow(reg, ctx, skill)
        observe.log_event("skill_loaded", skill=skill.name, source=skill.source)
        return ToolResult(_describe(skill, body, note), trusted=True)

    @reg.tool(level="ask")
    async def save_skill(
        name: str, description: str, instructions: str, *, ctx: ToolContext
    ) -> str:
        """Save a job you just did, which the owner will want again, as a skill (or a new
        version of a skill you saved before). The owner sees the whole text and approves it.

        Args:
            name: 1-64 lower-case letters, digits and single hyphens, naming the job.
            description: What the skill does and when to use it, in the words a user would say.
            instructions: The Markdown body: the steps that worked, exact commands and checks.
        """
        if "---" in description:
            raise ToolError("the description may not contain '---' (it ends the front matter)")
        provenance = {
            "luna-session": ctx.session_id,
            "luna-turn": observe.turn_id_var.get() or "",
        }
        try:
            skill = await asyncio.to_thread(
                learned.save, cfg, name, description, instructions, provenance
            )
        except SkillError as e:
            raise ToolError(str(e)) from None
        version = skill.metadata.get("luna-version", "?")
        observe.log_event("skill_saved", skill=skill.name, version=version)
        return (
            f"Saved the skill {skill.name!r}, version {version}, in {skill.folder}. load_skill "
            "reaches it now; it joins this session's list of skills at its next compaction."
        )


def _find(library: SkillLibrary, name: str) -> Skill:
    catalog = library.scan()
    skill = catalog.skills.get(name)
    if skill is not None:
        return skill
    if name in catalog.disabled:
        raise ToolError(f"the skill {name!r} is disabled by the owner; do not use it")
    broken = [p for p in catalog.left_out if p.name == name]
    if broken:
        raise ToolError(f"the skill {name!r} cannot be used: {broken[0].what}")
    hint = did_you_mean(name, catalog.skills, n=3, cutoff=0.5)
    names = ", ".join(catalog.skills) or "none"
    raise ToolError(f"there is no skill {name!r} now (removed?){hint}. Skills: {names}")


def _read_body(skill: Skill) -> str:
    body = current_body(skill)
    if isinstance(body, Problem):
        raise ToolError(f"the skill {skill.name!r} cannot be read now: {body.what}")
    return body


def _read_file(skill: Skill, raw: str) -> str:
    try:
        path = check_relative(skill, raw)
    except ValueError as e:
        raise ToolError(str(e)) from None
    if not path.is_file():
        listed = ", ".join(skill.files[:20]) or "none"
        raise ToolError(f"{skill.name} has no file {raw!r}; its files: {listed}")
    with path.open("rb") as f:
        data = f.read(MAX_FILE_BYTES + 1)
    if b"\0" in data[:8192]:
        return f"{raw} is a binary file ({path.stat().st_size:,} bytes) in {skill.folder}."
    text = data[:MAX_FILE_BYTES].decode("utf-8", "replace")
    cut = "\n[... cut: read the rest with read_file]" if len(data) > MAX_FILE_BYTES else ""
    return f"{skill.name}/{raw}:\n{text}{cut}"


def _describe(skill: Skill, body: str, note: str) -> str:
    files = list(skill.files[:MAX_LISTED_FILES])
    more = f" (+{len(skill.files) - len(files)} more)" if len(skill.files) > len(files) else ""
    listing = ", ".join(files) + more if files else "none"
    return (
        f"Skill {skill.name!r} ({skill.source}). Its folder: {skill.folder} (read-only; "
        f"bash and read_file see it at that path; run its scripts from there).\n"
        f"Its files: {listing}{note}\n\n{body.strip()}"
    )


def _narrow(reg: ToolRegistry, ctx: ToolContext, skill: Skill) -> str:
    """Apply the skill's allowed-tools to the rest of the turn; a note for the model."""
    if not skill.allowed_tools:
        return ""
    known = set(reg.names())
    wanted: set[str] = set()
    ignored: list[str] = []
    for entry in skill.allowed_tools:
        base = entry.split("(", 1)[0].strip()
        names = TOOL_ALIASES.get(base.lower(), (base,))
        hit = [n for n in names if n in known]
        wanted.update(hit)
        if not hit:
            ignored.append(entry)
    if not wanted:
        return f"\nIts allowed-tools name no tool Luna has ({', '.join(ignored)}): not applied."
    current = ctx.allowed_tools if ctx.allowed_tools is not None else frozenset(known)
    ctx.allowed_tools = frozenset((wanted | {"load_skill"}) & current)
    ctx.narrowed_by = f"the skill {skill.name!r}"
    skipped = f" ({', '.join(ignored)} ignored: no such tool here)" if ignored else ""
    allowed = ", ".join(sorted(ctx.allowed_tools))
    return f"\nFor the rest of this turn it allows only: {allowed}{skipped}."
