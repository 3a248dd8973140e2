"""Every skill Luna can see: where skills come from, which one wins a name, which are enabled.

Sources, in the order that wins when two skills have one name:
- ``installed``: ``<data folder>/skills/NAME/`` (``luna skills add`` copies them there);
- ``path``: the read-only folders in ``skills.paths`` (a folder that is a skill, or holds
  skill folders one or two levels down, as a checkout of a public skills repository does);
- ``learned``: ``<data folder>/skills/learned/NAME/``, written by the model through
  ``save_skill`` with the owner's approval (``luna.skills.learned``);
- ``bundled``: the skills that ship with Luna (``luna/skills/bundled/``).

Invariants:
- ``scan`` never raises for bad input: each folder that is not a usable skill is left out
  with one ``Problem`` line, a duplicate name is left out naming the skill that won, and the
  other skills still load.
- A skill's front matter is parsed again only when its SKILL.md changed (size, mtime), so a
  scan of 100 unchanged skills reads no file; folders are listed each time, so a skill added,
  edited or removed is seen at the next scan (a session sees it at its next head).
- Disabled names live in ``<data folder>/skills/state.json`` (``luna.skills.store`` writes it).
- Blocking: ``scan`` lists folders and reads files; async callers use ``catalog()``;
  ``start_warming`` runs the first scan in the background at start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from luna.config import Config
from luna.skills.folder import Problem, Skill, read_skill

log = logging.getLogger(__name__)

SOURCES = ("installed", "path", "learned", "bundled")  # the first wins a name
BUNDLED = Path(__file__).resolve().parent / "bundled"
LEARNED = "learned"  # the folder of learned skills, inside the installed ones: a reserved name
STATE = "state.json"


@dataclass(frozen=True)
class Catalog:
    """One scan: the enabled skills by name, the disabled ones, and what was left out."""

    skills: dict[str, Skill] = field(default_factory=dict)
    disabled: dict[str, Skill] = field(default_factory=dict)
    left_out: list[Problem] = field(default_factory=list)

    def index(self) -> list[dict[str, str]]:
        """Level 1 of progressive disclosure: name and description of each enabled skill."""
        return [{"name": s.name, "description": s.description} for s in self.skills.values()]

    def to_json(self) -> dict[str, Any]:
        """Every skill (enabled or not, by name) and what was left out: ``luna skills list
        --json`` and the web page's ``GET /api/skills``."""
        rows = [(s, True) for s in self.skills.values()]
        rows += [(s, False) for s in self.disabled.values()]
        rows.sort(key=lambda r: r[0].name)
        return {
            "skills": [skill_json(s, enabled=on) for s, on in rows],
            "left_out": [problem_json(p) for p in self.left_out],
        }


def skill_json(skill: Skill, *, enabled: bool) -> dict[str, Any]:
    data = asdict(skill)
    data.update(folder=str(skill.folder), skill_md=str(skill.skill_md), enabled=enabled)
    data.update(allowed_tools=list(skill.allowed_tools), files=list(skill.files))
    return data


def problem_json(problem: Problem) -> dict[str, Any]:
    return {
        "file": str(problem.file),
        "source": problem.source,
        "name": problem.name,
        "problem": problem.what,
        "fix": problem.fix,
        "errors": list(problem.errors),
    }


def installed_dir(cfg: Config) -> Path:
    return cfg.data_dir / "skills"


def learned_dir(cfg: Config) -> Path:
    return installed_dir(cfg) / LEARNED


def readable_roots(cfg: Config) -> list[Path]:
    """Where skills live: the file tools and the bash sandbox may read these, never write."""
    if not cfg.skills.enabled:
        return []
    return [installed_dir(cfg), *cfg.skills.paths, BUNDLED]


def read_disabled(cfg: Config) -> set[str]:
    path = installed_dir(cfg) / STATE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return set()
    except (OSError, ValueError) as e:
        log.warning("skills: %s is unreadable (%s); every skill counts as enabled", path, e)
        return set()
    names = data.get("disabled") if isinstance(data, dict) else None
    return {str(n) for n in names} if isinstance(names, list) else set()


class SkillLibrary:
    """The skills of one configuration; ``scan`` is cheap when nothing changed."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self._parsed: dict[Path, tuple[tuple[int, ...], Skill | Problem]] = {}
        self._lock = threading.Lock()  # scans may run in two worker threads at once
        self._warming: asyncio.Task[Catalog] | None = None  # held: the loop keeps weak refs

    def folders(self) -> list[tuple[str, Path]]:
        """(source, folder) of every candidate skill, in precedence order."""
        out: list[tuple[str, Path]] = []
        installed = installed_dir(self.cfg)
        out += [("installed", p) for p in _children(installed) if p.name != LEARNED]
        for root in self.cfg.skills.paths:
            out += [("path", p) for p in _skill_folders(root)]
        out += [("learned", p) for p in _children(learned_dir(self.cfg))]
        out += [("bundled", p) for p in _children(BUNDLED)]
        return out

    def scan(self) -> Catalog:
        if not self.cfg.skills.enabled:
            return Catalog()
        disabled = read_disabled(self.cfg)
        with self._lock:
            found = [self._read(folder, source) for source, folder in self.folders()]
        catalog = Catalog()
        for item in found:
            if isinstance(item, Problem):
                catalog.left_out.append(item)
                continue
            winner = catalog.skills.get(item.name) or catalog.disabled.get(item.name)
            if winner is not None:
                catalog.left_out.append(
                    Problem(
                        item.skill_md,
                        item.source,
                        f"a second skill named {item.name!r} ({winner.source} {winner.folder} "
                        "wins)",
                        "rename one of them (the folder and its name together)",
                        name=item.name,
                    )
                )
                continue
            target = catalog.disabled if item.name in disabled else catalog.skills
            target[item.name] = item
        sorted_skills = dict(sorted(catalog.skills.items()))
        return Catalog(sorted_skills, dict(sorted(catalog.disabled.items())), catalog.left_out)

    async def catalog(self) -> Catalog:
        return await asyncio.to_thread(self.scan)

    def start_warming(self) -> asyncio.Task[Catalog]:
        """Scan once in the background (at start), so the first session's head finds every
        SKILL.md parsed already; a scan meanwhile waits for it and reads its results."""
        self._warming = asyncio.create_task(self.catalog(), name="skills-warm")
        return self._warming

    def _read(self, folder: Path, source: str) -> Skill | Problem:
        key = _stamp(folder)
        cached = self._parsed.get(folder)
        if key is not None and cached is not None and cached[0] == key:
            return cached[1]
        result = read_skill(folder, source)
        if key is not None:
            self._parsed[folder] = (key, result)
        return result


def _stamp(folder: Path) -> tuple[int, ...] | None:
    """What says the skill changed: its SKILL.md, or its folder (a file added or removed)."""
    try:
        md, top = (folder / "SKILL.md").stat(), folder.stat()
    except OSError:
        return None
    return (md.st_mtime_ns, md.st_size, top.st_mtime_ns)


def _children(root: Path) -> list[Path]:
    """The visible sub-folders of ``root`` (none when it does not exist), sorted."""
    try:
        return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
    except OSError:
        return []


def _skill_folders(root: Path) -> list[Path]:
    """A ``skills.paths`` entry: itself when it is a skill, else skill folders in it, up to
    two levels down (``repo/NAME/`` and ``repo/skills/NAME/``)."""
    if (root / "SKILL.md").is_file():
        return [root]
    out: list[Path] = []
    for child in _children(root):
        if (child / "SKILL.md").is_file():
            out.append(child)
        else:
            out += [g for g in _children(child) if (g / "SKILL.md").is_file()]
    return out
