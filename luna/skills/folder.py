"""One skill folder in the open Agent Skills format, read and checked.

The format's rules (the front matter between ``---`` lines, ``name``, ``description`` and the
optional fields) are the reference library's: ``skills-ref`` parses and validates them, so Luna
calls a skill valid exactly when every other agent using the oracle does. Luna adds limits of
its own, for a daemon that reads folders it did not write:
- ``SKILL.md`` at most ``MAX_SKILL_MD_BYTES`` of UTF-8 text (no NUL bytes), its front matter
  at most ``MAX_FRONT_MATTER_BYTES``, nested at most ``MAX_INDENT`` columns deep (the
  oracle's YAML parser is quadratic in the keys and recursive in the depth: a hostile front
  matter would take seconds, or overflow the stack);
- at most ``MAX_FILES`` files in the folder;
- no symlink, ``SKILL.md`` included, that leads out of the folder.

Invariants:
- ``read_skill`` never raises for bad input: a folder that is not a usable skill comes back as
  a ``Problem`` naming the file, what is wrong and how to fix it, in one line.
- ``check_relative`` is the one rule for a path inside a skill (``load_skill``'s ``path``).
- Blocking (file reads, YAML parsing): callers run it in a worker thread.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from skills_ref.errors import ParseError
from skills_ref.parser import find_skill_md, parse_frontmatter
from skills_ref.validator import ALLOWED_FIELDS as FIELDS
from skills_ref.validator import MAX_COMPATIBILITY_LENGTH as MAX_COMPATIBILITY
from skills_ref.validator import MAX_DESCRIPTION_LENGTH as MAX_DESCRIPTION
from skills_ref.validator import validate_metadata

MAX_SKILL_MD_BYTES = 100_000
MAX_FRONT_MATTER_BYTES = 8_192
MAX_INDENT = 24
MAX_FILES = 1000
SPEC = "https://agentskills.io/specification"


@dataclass(frozen=True)
class Skill:
    """A valid skill: its front matter and where its files are (the body is read on load)."""

    name: str
    description: str
    folder: Path  # resolved
    source: str  # installed | path | learned | bundled
    skill_md: Path
    files: tuple[str, ...] = ()  # bundled files, relative to the folder, SKILL.md left out
    license: str | None = None
    compatibility: str | None = None
    allowed_tools: tuple[str, ...] = ()
    metadata: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Problem:
    """Why a folder was left out: which file, what is wrong, how to fix it."""

    file: Path
    source: str
    what: str
    fix: str
    errors: tuple[str, ...] = ()  # every error the oracle found (``luna skills check``)
    name: str | None = None  # the name it claims, when it has one

    @property
    def line(self) -> str:
        return f"{self.file}: {self.what} ({self.fix})"


def read_skill(folder: Path, source: str) -> Skill | Problem:
    """The skill in ``folder``, or the problem that keeps it out."""
    folder = Path(folder)
    if not folder.is_dir():
        return Problem(folder, source, "not a folder", "a skill is a folder holding SKILL.md")
    skill_md = find_skill_md(folder)
    if skill_md is None:
        return Problem(folder, source, "no SKILL.md", f"add one with front matter ({SPEC})")
    real = folder.resolve()
    try:
        info = skill_md.lstat()
        if stat.S_ISLNK(info.st_mode) and not skill_md.resolve().is_relative_to(real):
            return Problem(skill_md, source, "links out of the skill's folder", "copy it in")
        size = skill_md.stat().st_size
        if size > MAX_SKILL_MD_BYTES:
            return Problem(
                skill_md,
                source,
                f"{size:,} bytes, over Luna's limit of {MAX_SKILL_MD_BYTES:,}",
                "move detail into references/ files that SKILL.md points to",
            )
        raw = skill_md.read_bytes()
    except OSError as e:
        return Problem(skill_md, source, f"unreadable ({e.strerror or e})", "check permissions")
    if b"\0" in raw:
        return Problem(skill_md, source, "a binary file", "SKILL.md must be Markdown text")
    try:
        content = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return Problem(skill_md, source, f"not UTF-8 (byte {e.start})", "save it as UTF-8")
    return _from_front_matter(folder, real, skill_md, content, source)


def _from_front_matter(
    folder: Path, real: Path, skill_md: Path, content: str, source: str
) -> Skill | Problem:
    front = content.split("---", 2)[1] if content.count("---") >= 2 else ""  # as the oracle
    if len(front.encode()) > MAX_FRONT_MATTER_BYTES:
        what = f"front matter over Luna's limit of {MAX_FRONT_MATTER_BYTES:,} bytes"
        return Problem(skill_md, source, what, "keep to name, description and a few fields")
    control = next((c for c in front if c < " " and c not in "\t\n\r" or c == "\x7f"), None)
    if control is not None:  # YAML forbids them (the oracle's parser fails on them)
        what = f"a control character (U+{ord(control):04X}) in the front matter"
        return Problem(skill_md, source, what, "remove it: the fields are plain text")
    if any(len(line) - len(line.lstrip()) > MAX_INDENT for line in front.splitlines()):
        what = f"front matter nested deeper than {MAX_INDENT} columns"
        return Problem(skill_md, source, what, "metadata is a flat map of names to text")
    fix = "start the file with ---, the YAML fields, then a closing --- line"
    try:
        meta, _body = parse_frontmatter(content)
    except ParseError as e:
        return Problem(skill_md, source, _one_line(str(e)), fix, (str(e),))
    except Exception as e:  # the oracle's YAML parser lets some errors through
        # (too deep a nesting is a RecursionError): the file is not a valid skill, whatever
        # the parser's way of saying so.
        what = f"front matter the YAML parser cannot read ({type(e).__name__})"
        return Problem(skill_md, source, what, fix, (what,))
    errors = validate_metadata(meta, folder)
    claimed = meta.get("name") if isinstance(meta.get("name"), str) else None
    if errors:
        more = f" (+{len(errors) - 1} more)" if len(errors) > 1 else ""
        return Problem(
            skill_md, source, errors[0] + more, _fix(meta, folder), tuple(errors), claimed
        )
    files = _bundled_files(real)
    if isinstance(files, Problem):
        return Problem(files.file, source, files.what, files.fix, name=claimed)
    return Skill(
        name=str(meta["name"]).strip(),
        description=" ".join(str(meta["description"]).split()),
        folder=real,
        source=source,
        skill_md=skill_md.resolve(),
        files=files,
        license=_text(meta.get("license")),
        compatibility=_text(meta.get("compatibility")),
        allowed_tools=_allowed_tools(meta.get("allowed-tools")),
        metadata=dict(meta.get("metadata") or {}),
    )


def _fix(meta: dict[str, Any], folder: Path) -> str:
    """How to fix the first kind of problem the oracle reports, from the fields themselves."""
    name, description = meta.get("name"), meta.get("description")
    extra = sorted(set(meta) - FIELDS)
    if extra:
        return f"remove {', '.join(extra)}: the format's fields are {', '.join(sorted(FIELDS))}"
    if not isinstance(name, str) or not name.strip():
        return "add `name: <folder name>` to the front matter"
    if name.strip() != folder.name:
        return f"rename the folder to {name.strip()!r} or set `name: {folder.name}`"
    if not isinstance(description, str) or not description.strip():
        return "add `description:` saying what the skill does and when to use it"
    if len(description) > MAX_DESCRIPTION:
        return f"shorten the description to {MAX_DESCRIPTION:,} characters"
    if len(str(meta.get("compatibility") or "")) > MAX_COMPATIBILITY:
        return f"shorten compatibility to {MAX_COMPATIBILITY} characters"
    return f"names are 1-64 lowercase letters, digits and single hyphens; see {SPEC}"


def _bundled_files(real: Path) -> tuple[str, ...] | Problem:
    """The folder's files (relative), or the problem: too many, or a link out of it."""
    found: list[str] = []
    for root, dirs, names in os.walk(real, followlinks=False):
        base = Path(root)
        for entry in [*dirs, *names]:
            path = base / entry
            if path.is_symlink() and not path.resolve().is_relative_to(real):
                return Problem(path, "", "links out of the skill's folder", "copy the file in")
        for name in names:
            rel = (base / name).relative_to(real).as_posix()
            if rel.lower() != "skill.md":
                found.append(rel)
            if len(found) > MAX_FILES:
                what = f"more than {MAX_FILES:,} files in the skill"
                return Problem(real, "", what, "a skill bundles a few scripts and references")
        dirs[:] = [d for d in dirs if not (base / d).is_symlink()]
    return tuple(sorted(found))


def check_relative(skill: Skill, raw: str) -> Path:
    """The file ``raw`` (relative to the skill's folder) names; ValueError with the reason."""
    rel = PurePosixPath(raw.strip())
    if not raw.strip() or rel.is_absolute() or ".." in rel.parts:
        raise ValueError(f"{raw!r} is not a path inside the skill (relative, without '..')")
    path = (skill.folder / rel).resolve()
    if not path.is_relative_to(skill.folder):
        raise ValueError(f"{raw!r} leads out of the skill's folder")
    return path


def read_body(skill: Skill) -> str:
    """The Markdown instructions after the front matter (read now: they may have changed)."""
    body: str = parse_frontmatter(skill.skill_md.read_text(encoding="utf-8"))[1]  # untyped lib
    return body


def current_body(skill: Skill) -> str | Problem:
    """The body of the skill as its folder is now (checked again: it may have been edited
    into something invalid, or removed, since the scan that found it)."""
    fresh = read_skill(skill.folder, skill.source)
    return fresh if isinstance(fresh, Problem) else read_body(fresh)


def _one_line(text: str, limit: int = 200) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _text(value: object) -> str | None:
    return str(value).strip() if value is not None else None


def _allowed_tools(value: object) -> tuple[str, ...]:
    """The spec's ``allowed-tools``: a space-delimited string or a list of strings."""
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list):
        return tuple(str(v).strip() for v in value if str(v).strip())
    return ()
