"""Changes to the skills in Luna's data folder: install, remove, enable and disable.

Invariants:
- ``add`` installs only a folder that ``read_skill`` accepts (the format by the oracle, plus
  Luna's limits), never over another skill of that name, and copies it into a temporary folder
  first, renamed into place: a crash never leaves half a skill where Luna looks.
- ``remove`` deletes only what Luna keeps (an installed or learned skill); a skill from
  ``skills.paths`` or one that ships with Luna is disabled instead, never deleted.
- ``state.json`` (the disabled names) is written to a temporary file and renamed.
- Every refusal is a ``SkillError`` with one line saying what to do instead.
- Blocking (file copies); the CLI runs it directly, async callers in a worker thread.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

from luna.config import Config
from luna.errors import SkillError
from luna.skills.folder import Problem, Skill, read_skill
from luna.skills.library import (
    LEARNED,
    STATE,
    SkillLibrary,
    installed_dir,
    learned_dir,
    read_disabled,
)


def add(cfg: Config, folder: Path) -> Skill:
    """Check ``folder`` and copy it to ``<data folder>/skills/NAME/``."""
    found = read_skill(folder, "installed")
    if isinstance(found, Problem):
        raise SkillError(f"not installed: {found.line}")
    if found.name == LEARNED:
        raise SkillError(f"not installed: {LEARNED!r} is reserved for learned skills; rename it")
    existing = SkillLibrary(cfg).scan()
    other = existing.skills.get(found.name) or existing.disabled.get(found.name)
    if other is not None and other.source in ("installed", "learned"):
        raise SkillError(
            f"not installed: a {other.source} skill {found.name!r} is already at {other.folder} "
            f"(`luna skills remove {found.name}` first to replace it)"
        )
    root = installed_dir(cfg)
    root.mkdir(parents=True, exist_ok=True)
    target = root / found.name
    with tempfile.TemporaryDirectory(dir=root, prefix=".add-") as tmp:
        staged = Path(tmp) / found.name
        shutil.copytree(found.folder, staged, symlinks=True)
        os.replace(staged, target)
    installed = read_skill(target, "installed")
    if isinstance(installed, Problem):  # pragma: no cover - it was valid a moment ago
        raise SkillError(f"installed, but it no longer reads: {installed.line}")
    return installed


def remove(cfg: Config, name: str) -> Skill:
    """Delete an installed skill (or a learned one, with its versions)."""
    catalog = SkillLibrary(cfg).scan()
    skill = catalog.skills.get(name) or catalog.disabled.get(name)
    if skill is None:
        raise SkillError(f"there is no skill {name!r} (see `luna skills list`)")
    if skill.source not in ("installed", "learned"):
        raise SkillError(
            f"{name!r} is a {skill.source} skill ({skill.folder}); Luna does not delete it: "
            f"`luna skills disable {name}` keeps it out"
        )
    root = installed_dir(cfg) if skill.source == "installed" else learned_dir(cfg)
    with tempfile.TemporaryDirectory(dir=root, prefix=".remove-") as tmp:
        os.replace(skill.folder, Path(tmp) / name)  # gone at once, deleted with tmp
        if skill.source == "learned":
            history = learned_dir(cfg) / ".versions" / name
            if history.exists():
                os.replace(history, Path(tmp) / ".versions")
    set_enabled(cfg, name, True)  # a later skill of that name starts enabled
    return skill


def set_enabled(cfg: Config, name: str, enabled: bool) -> None:
    """Enable or disable a skill by name (it need not exist yet)."""
    disabled = read_disabled(cfg)
    disabled = disabled - {name} if enabled else disabled | {name}
    path = installed_dir(cfg) / STATE
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"disabled": sorted(disabled)}, indent=1) + "\n"
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        f.write(text)
    os.replace(f.name, path)


def find(cfg: Config, name: str) -> Skill:
    """An enabled or disabled skill by name; SkillError naming what exists otherwise."""
    catalog = SkillLibrary(cfg).scan()
    skill = catalog.skills.get(name) or catalog.disabled.get(name)
    if skill is not None:
        return skill
    broken = [p for p in catalog.left_out if p.name == name]
    if broken:
        raise SkillError(f"{name!r} is left out: {broken[0].line}")
    raise SkillError(f"there is no skill {name!r} (see `luna skills list`)")
