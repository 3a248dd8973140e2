"""``luna skills list | show | add | remove | enable | disable | check | diff | revert``.

Invariants:
- Text that comes from a skill's files (names, descriptions, bodies, problems) is printed
  through ``luna.messages.neutralize``: a skill cannot drive the terminal.
- A refusal is one line (a ``SkillError``, printed by ``luna.__main__``, exit 1); ``check``
  exits 1 when anything is left out, 0 when every skill is valid.
- Works beside a running Luna: it reads the folders, and the running Luna sees a change at
  a session's next head (a new session or a compaction).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
from pathlib import Path

from luna.config import Config
from luna.messages import neutralize
from luna.skills import learned, store
from luna.skills.folder import Skill, read_body, read_skill
from luna.skills.library import Catalog, SkillLibrary


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser(
        "skills",
        help="list, install and manage skills (Agent Skills folders that teach Luna a job)",
        description=(
            "Skills are folders in the open Agent Skills format (SKILL.md with name and "
            "description front matter, plus optional scripts/, references/, assets/). Luna "
            "reads data/skills/NAME/, data/skills/learned/, the folders in skills.paths and "
            "the ones it ships with. Example: `luna skills add ~/skills/pdf-tools`."
        ),
    )
    sub = p.add_subparsers(dest="skills_command", metavar="ACTION", required=True)
    lst = sub.add_parser("list", help="every skill: source, enabled, folder; and what is left out")
    lst.add_argument("--json", action="store_true", help="machine-readable output")
    lst.set_defaults(handler=list_skills)
    show = sub.add_parser("show", help="one skill's front matter, files and instructions")
    show.add_argument("name")
    show.set_defaults(handler=show_skill)
    add = sub.add_parser("add", help="check a skill folder and install a copy of it")
    add.add_argument("folder", type=Path)
    add.set_defaults(handler=add_skill)
    remove = sub.add_parser("remove", help="delete an installed (or learned) skill")
    remove.add_argument("name")
    remove.set_defaults(handler=remove_skill)
    for action, verb in (("enable", "use"), ("disable", "stop using")):
        q = sub.add_parser(action, help=f"{verb} a skill (new sessions, or at a compaction)")
        q.add_argument("name")
        q.set_defaults(handler=enable_skill if action == "enable" else disable_skill)
    check = sub.add_parser("check", help="validate one skill folder, or every skill Luna sees")
    check.add_argument("folder", nargs="?", type=Path)
    check.set_defaults(handler=check_skills)
    diff = sub.add_parser("diff", help="a learned skill's previous version against the current")
    diff.add_argument("name")
    diff.set_defaults(handler=diff_skill)
    revert = sub.add_parser("revert", help="make a learned skill's previous version current")
    revert.add_argument("name")
    revert.set_defaults(handler=revert_skill)


async def _catalog(cfg: Config) -> Catalog:
    return await asyncio.to_thread(SkillLibrary(cfg).scan)


def _out(text: str) -> None:
    print(neutralize(text))


async def list_skills(args: argparse.Namespace, cfg: Config) -> int:
    catalog = await _catalog(cfg)
    if args.json:
        print(json.dumps(catalog.to_json(), ensure_ascii=False, indent=1))
        return 0
    rows = [(s, True) for s in catalog.skills.values()]
    rows += [(s, False) for s in catalog.disabled.values()]
    rows.sort(key=lambda r: r[0].name)
    if not cfg.skills.enabled:
        _out("skills are off (skills.enabled = false)")
        return 0
    width = shutil.get_terminal_size((100, 20)).columns
    if not rows:
        _out("no skills (luna skills add FOLDER installs one)")
    name_w = max((len(s.name) for s, _ in rows), default=0)
    for s, on in rows:
        _out(f"{s.name:<{name_w}}  {s.source:<9}  {'enabled ' if on else 'disabled'}  {s.folder}")
        room = max(40, width - 4)
        desc = s.description if len(s.description) <= room else s.description[: room - 1] + "…"
        _out(f"    {desc}")
    for p in catalog.left_out:
        _out(f"left out: {p.line}")
    _out(f"\n{len(catalog.skills)} enabled, {len(catalog.disabled)} disabled, "
         f"{len(catalog.left_out)} left out")  # fmt: skip
    return 0


async def show_skill(args: argparse.Namespace, cfg: Config) -> int:
    skill = await asyncio.to_thread(store.find, cfg, args.name)
    body = await asyncio.to_thread(read_body, skill)
    _out(f"{skill.name} ({skill.source}) in {skill.folder}")
    _out(f"description: {skill.description}")
    for label, value in (("license", skill.license), ("compatibility", skill.compatibility)):
        if value:
            _out(f"{label}: {value}")
    if skill.allowed_tools:
        _out(f"allowed-tools: {' '.join(skill.allowed_tools)}")
    for key, value in skill.metadata.items():
        _out(f"metadata {key}: {value}")
    _out(f"files: {', '.join(skill.files) or 'none'}\n")
    _out(body)
    return 0


async def add_skill(args: argparse.Namespace, cfg: Config) -> int:
    skill = await asyncio.to_thread(store.add, cfg, args.folder)
    _out(f"installed {skill.name} in {skill.folder} ({len(skill.files)} files besides SKILL.md)")
    _out("new sessions see it; running ones at their next compaction")
    return 0


async def remove_skill(args: argparse.Namespace, cfg: Config) -> int:
    skill = await asyncio.to_thread(store.remove, cfg, args.name)
    _out(f"removed {skill.name} ({skill.source}, was in {skill.folder})")
    return 0


async def enable_skill(args: argparse.Namespace, cfg: Config) -> int:
    return await _set_enabled(cfg, args.name, True)


async def disable_skill(args: argparse.Namespace, cfg: Config) -> int:
    return await _set_enabled(cfg, args.name, False)


async def _set_enabled(cfg: Config, name: str, enabled: bool) -> int:
    await asyncio.to_thread(store.find, cfg, name)  # refuses an unknown name
    await asyncio.to_thread(store.set_enabled, cfg, name, enabled)
    _out(f"{name} {'enabled' if enabled else 'disabled'} (new sessions; running ones at "
         "their next compaction)")  # fmt: skip
    return 0


async def check_skills(args: argparse.Namespace, cfg: Config) -> int:
    if args.folder is not None:
        found = await asyncio.to_thread(read_skill, args.folder, "check")
        if isinstance(found, Skill):
            _out(f"ok: {found.name} ({len(found.files)} files besides SKILL.md)")
            return 0
        for error in found.errors or (found.what,):
            _out(f"{found.file}: {error}")
        _out(f"fix: {found.fix}")
        return 1
    catalog = await _catalog(cfg)
    for p in catalog.left_out:
        _out(f"left out: {p.line}")
    _out(f"{len(catalog.skills) + len(catalog.disabled)} skills valid, "
         f"{len(catalog.left_out)} left out")  # fmt: skip
    return 1 if catalog.left_out else 0


async def diff_skill(args: argparse.Namespace, cfg: Config) -> int:
    _out((await asyncio.to_thread(learned.diff, cfg, args.name)).rstrip("\n"))
    return 0


async def revert_skill(args: argparse.Namespace, cfg: Config) -> int:
    skill = await asyncio.to_thread(learned.revert, cfg, args.name)
    _out(f"{skill.name} is back to version {skill.metadata.get('luna-reverted-to')}, kept as "
         f"version {skill.metadata.get('luna-version')}")  # fmt: skip
    return 0
