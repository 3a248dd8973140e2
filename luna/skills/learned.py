"""Learned skills: written by the model (``save_skill``, approved by the owner), every version kept.

Layout, inside ``<data folder>/skills/learned/``:
- ``NAME/SKILL.md``: the current version, a skill folder like any other;
- ``.versions/NAME/0001/SKILL.md``, ``0002/`` ...: every version ever saved, never rewritten.

Invariants:
- A learned skill never takes the name of a skill from another source (installed, a
  ``skills.paths`` folder, bundled): the owner's skills are never replaced by the model's.
- What is saved is a valid skill by the same reader as every other (the oracle's format plus
  Luna's limits), checked in a staging folder before anything is moved into place.
- Provenance lives in the skill's own ``metadata`` (``luna-session``, ``luna-turn``,
  ``luna-saved``, ``luna-version``), so ``luna skills show`` and any other agent can read it.
- ``revert`` makes the previous version current again as a new version: history only grows.
- Blocking (files); async callers run it in a worker thread.
"""

from __future__ import annotations

import datetime as dt
import difflib
import json
import os
import shutil
import tempfile
from pathlib import Path

from luna.config import Config
from luna.errors import SkillError
from luna.skills.folder import Problem, Skill, read_skill
from luna.skills.library import SkillLibrary, learned_dir

VERSIONS = ".versions"


def versions_dir(cfg: Config, name: str) -> Path:
    return learned_dir(cfg) / VERSIONS / name


def versions(cfg: Config, name: str) -> list[Path]:
    """The folders of every saved version of ``name``, oldest first."""
    root = versions_dir(cfg, name)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and p.name.isdigit())


def render(name: str, description: str, instructions: str, metadata: dict[str, str]) -> str:
    """SKILL.md text. Strings are written as double-quoted YAML (JSON's escapes are YAML's)."""
    lines = ["---", f"name: {name}", f"description: {_quoted(description)}", "metadata:"]
    lines += [f"  {key}: {_quoted(value)}" for key, value in metadata.items()]
    return "\n".join([*lines, "---", "", instructions.strip(), ""])


def save(
    cfg: Config,
    name: str,
    description: str,
    instructions: str,
    provenance: dict[str, str],
) -> Skill:
    """Save a new learned skill, or a new version of one; returns the current skill."""
    owner = _owner_skill(cfg, name)
    if owner is not None:
        raise SkillError(
            f"{name!r} is a skill the owner keeps ({owner.source}, {owner.folder}); a learned "
            "skill never replaces it: save it under another name"
        )
    number = len(versions(cfg, name)) + 1
    saved = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    meta = {**provenance, "luna-saved": saved, "luna-version": str(number)}
    text = render(name, " ".join(description.split()), instructions, meta)
    return _publish(cfg, name, text)


def diff(cfg: Config, name: str) -> str:
    """The previous version's SKILL.md against the current one, as a unified diff."""
    saved = versions(cfg, name)
    if not saved:
        raise SkillError(f"{name!r} is not a learned skill: it has no versions")
    if len(saved) == 1:
        raise SkillError(f"{name!r} has one version only ({saved[0].name}): nothing to compare")
    old, new = (p / "SKILL.md" for p in saved[-2:])
    return "".join(
        difflib.unified_diff(
            old.read_text(encoding="utf-8").splitlines(keepends=True),
            new.read_text(encoding="utf-8").splitlines(keepends=True),
            fromfile=f"{name} version {int(saved[-2].name)}",
            tofile=f"{name} version {int(saved[-1].name)}",
        )
    )


def revert(cfg: Config, name: str) -> Skill:
    """Make the version before the current one current again (saved as a new version)."""
    saved = versions(cfg, name)
    if len(saved) < 2:
        raise SkillError(f"{name!r} has no earlier version to go back to")
    text = (saved[-2] / "SKILL.md").read_text(encoding="utf-8")
    number = len(saved) + 1
    back = int(saved[-2].name)
    text = text.replace(
        f"  luna-version: {_quoted(str(back))}",
        f"  luna-version: {_quoted(str(number))}\n  luna-reverted-to: {_quoted(str(back))}",
        1,
    )
    return _publish(cfg, name, text)


def _publish(cfg: Config, name: str, text: str) -> Skill:
    """Check ``text`` as NAME/SKILL.md, keep it as the next version, make it current."""
    root = learned_dir(cfg)
    (root / VERSIONS).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root, prefix=".save-") as tmp:
        staged = Path(tmp) / name
        staged.mkdir()
        (staged / "SKILL.md").write_text(text, encoding="utf-8")
        checked = read_skill(staged, "learned")
        if isinstance(checked, Problem):
            raise SkillError(f"not saved: {_problem_line(checked, staged)}")
        version = versions_dir(cfg, name) / f"{len(versions(cfg, name)) + 1:04d}"
        version.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(staged, version)
        current = root / name
        if current.exists():
            os.replace(current, Path(tmp) / "previous")  # deleted with tmp; kept as a version
        os.replace(staged, current)
    skill = read_skill(current, "learned")
    if isinstance(skill, Problem):  # pragma: no cover - it was valid a moment ago
        raise SkillError(f"saved, but it no longer reads: {skill.line}")
    return skill


def _owner_skill(cfg: Config, name: str) -> Skill | None:
    """A skill named ``name`` from a source other than the learned one."""
    catalog = SkillLibrary(cfg).scan()
    found = catalog.skills.get(name) or catalog.disabled.get(name)
    if found is not None and found.source != "learned":
        return found
    return None


def _problem_line(problem: Problem, staged: Path) -> str:
    return f"{problem.what} ({problem.fix})".replace(str(staged), "SKILL.md")


def _quoted(value: str) -> str:
    return json.dumps(str(value), ensure_ascii=False)
