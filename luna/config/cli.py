"""``luna config show`` and ``luna config set KEY VALUE``.

Invariants:
- ``set`` validates the whole resulting configuration (bounds included, and the checks start-up
  makes across keys: the heartbeat) before writing, and
  writes atomically.
- A list value is a JSON array or comma-separated, as ``config set --help`` says.
- ``set`` edits the file with tomlkit: every comment, blank line and key order survives, so the
  documentation in config.toml is never lost.
- Each ``set`` keeps the previous file as ``config.toml.bak.<timestamp>``; the oldest backup (the
  file as it was before the first ``set``) is never pruned, the newest ``KEEP_BACKUPS`` are kept.
- Secrets are never written to the file nor printed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import tomlkit
from tomlkit.exceptions import TOMLKitError

from luna.config.loader import build_config, default_config_path, effective_items, field_types
from luna.config.schema import SECRET_KEYS, SECTIONS, Config
from luna.errors import ConfigError, did_you_mean

KEEP_BACKUPS = 10


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("config", help="show or change the configuration")
    sub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="print every setting, its value and where it came from")
    show.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    show.set_defaults(handler=show_config)
    set_ = sub.add_parser(
        "set",
        help="validate and write one setting to config.toml (comments are kept; so is a backup)",
        description="Example: luna config set llm.endpoint http://127.0.0.1:8001/v1",
    )
    set_.add_argument("key", help="section.key, e.g. agent.max_rounds")
    set_.add_argument("value", help="the new value (lists: comma-separated or a JSON array)")
    set_.set_defaults(handler=set_config)


async def show_config(args: argparse.Namespace, cfg: Config) -> int:
    rows = effective_items(cfg)
    if args.json:
        print(json.dumps({k: {"value": v, "source": s} for k, v, s in rows}, default=str))
        return 0
    print(f"config file: {cfg.path or '(none: built-in defaults)'}")
    width = max(len(k) for k, _, _ in rows)
    for key, value, source in rows:
        shown = value if not isinstance(value, str) or len(value) < 70 else value[:67] + "..."
        print(f"{key:<{width}}  {shown!s:<40}  [{source}]")
    return 0


def parse_value(section: str, name: str, raw: str) -> Any:
    """The TOML value for ``raw``: JSON for lists, tables and numbers; strings stay strings;
    a list may also be written comma-separated (``A,B``), as ``config set --help`` says."""
    tp = field_types(section).get(name)
    if tp in (str, Path):
        return raw
    if typing.get_origin(tp) is list and not raw.lstrip().startswith("["):
        items = [part.strip() for part in raw.split(",")]
        is_text = typing.get_args(tp)[0] in (str, Path)
        return [item if is_text else _json_or_text(item) for item in items if item]
    return _json_or_text(raw)


def _json_or_text(raw: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def _check_key(key: str) -> tuple[str, str]:
    if key in SECRET_KEYS:
        raise ConfigError(
            f"config: {key} is a secret; set {SECRET_KEYS[key]} in the environment instead"
        )
    section, _, name = key.partition(".")
    if section == "hooks":
        raise ConfigError(
            "config: each webhook is a [hooks.NAME] table of its own: edit config.toml (its "
            "commented [hooks.door] example shows every key)"
        )
    if section in SECTIONS and not name:
        example = next(iter(SECTIONS[section].model_fields))
        raise ConfigError(
            f"config: [{section}] is a section; name one of its keys, like {section}.{example}"
        )
    if section not in SECTIONS:
        hint = did_you_mean(section, SECTIONS)
        raise ConfigError(
            f"config: there is no section [{section}]{hint}; a key looks like section.key, "
            "like agent.max_rounds"
        )
    if name not in SECTIONS[section].model_fields:
        keys = [f"{section}.{k}" for k in SECTIONS[section].model_fields]
        raise ConfigError(f"config: there is no key {key}{did_you_mean(key, keys)}")
    return section, name


def set_value(
    path: Path, key: str, raw: str, *, check: Callable[[Config], None] | None = None
) -> tuple[Any, Path | None]:
    """Validate and write one key; returns (value written, backup file or None). ``check`` is
    start-up's check across keys (``luna.scheduler.heartbeat.check_config``), passed in by
    the layer that may import it: config sits below the scheduler."""
    section, name = _check_key(key)
    try:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        doc = tomlkit.parse(text)
    except (TOMLKitError, UnicodeDecodeError) as e:
        raise ConfigError(f"config: {path} cannot be edited: {e}") from None
    except OSError as e:
        raise ConfigError(f"config: cannot read {path}: {e.strerror}") from None
    value = parse_value(section, name, raw)
    table = doc.get(section)
    if table is None:
        table = tomlkit.table()
        doc[section] = table
    table[name] = value
    # Validate the whole document as it will be written (raises ConfigError with the key),
    # and ask what start-up asks across keys: a file this writes is one Luna starts with.
    cfg = build_config(doc.unwrap(), {}, base_dir=path.resolve().parent)
    if check is not None:
        check(cfg)
    backup = _backup(path) if path.exists() else None
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(tomlkit.dumps(doc), encoding="utf-8")
    os.replace(tmp, path)
    return value, backup


def _backup(path: Path) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S-%f")
    backup = path.with_name(f"{path.name}.bak.{stamp}")
    shutil.copy2(path, backup)
    older = sorted(path.parent.glob(f"{path.name}.bak.*"))
    for stale in older[1:-KEEP_BACKUPS]:  # keep the first (the original) and the newest few
        stale.unlink(missing_ok=True)
    return backup


async def set_config(args: argparse.Namespace, cfg: Config) -> int:
    path = cfg.path or default_config_path()
    value, backup = set_value(path, args.key, args.value, check=args.check_config)
    print(f"{args.key} = {value!r} written to {path}")
    if backup is not None:
        print(f"previous file kept as {backup.name}")
    from luna.datafolder import running_pid

    pid = running_pid(cfg.data_dir)  # safe to write beside it; it reads the file only at start
    if pid is not None:
        print(f"note: Luna is running on this data folder (pid {pid}): restart it to use this")
    return 0


__all__ = ["add_parser", "parse_value", "set_value", "show_config"]
