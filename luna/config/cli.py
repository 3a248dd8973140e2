"""``luna config show`` and ``luna config set KEY VALUE``.

Invariants: ``set`` validates the whole resulting configuration before writing; the previous
file is kept as ``config.toml.bak``; secrets are never written to the file nor printed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys

import tomli_w

from luna.config import (
    SECRET_KEYS,
    SECTIONS,
    Config,
    build_config,
    default_config_path,
    effective_items,
    field_types,
    read_toml,
)
from luna.errors import ConfigError


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("config", help="show or change the configuration")
    sub = p.add_subparsers(dest="config_command", metavar="ACTION", required=True)
    show = sub.add_parser("show", help="print every setting, its value and where it came from")
    show.add_argument("--json", action="store_true", help="one JSON object instead of a table")
    show.set_defaults(handler=show_config)
    set_ = sub.add_parser(
        "set",
        help="validate and write one setting to config.toml (keeps config.toml.bak)",
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


def _parse_value(raw: str) -> object:
    """Accept JSON for lists/tables/numbers; fall back to the plain string."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


async def set_config(args: argparse.Namespace, cfg: Config) -> int:
    key: str = args.key
    if key in SECRET_KEYS:
        raise ConfigError(
            f"config: {key} is a secret; set {SECRET_KEYS[key]} in the environment instead"
        )
    section, _, name = key.partition(".")
    if section not in SECTIONS or not name:
        raise ConfigError(f"config: KEY must look like section.key, got {key!r}")
    path = cfg.path or default_config_path()
    data = read_toml(path) if path.exists() else {}
    value = _parse_value(args.value)
    if field_types(section).get(name) is str and not isinstance(value, str):
        value = args.value
    data.setdefault(section, {})[name] = value
    # Validate the whole document as it will be written (raises ConfigError with the key).
    build_config(data, {}, base_dir=path.resolve().parent)
    if path.exists():
        shutil.copy2(path, path.with_name(path.name + ".bak"))
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(tomli_w.dumps(data).encode())
    tmp.replace(path)
    print(f"{key} = {value!r} written to {path}", file=sys.stdout)
    if path.with_name(path.name + ".bak").exists():
        print(f"previous file kept as {path.name}.bak")
    print("note: comments in config.toml are not preserved by `config set`.")
    return 0
