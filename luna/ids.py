"""The ids people and the model give Luna (a memory, a task, a memory scope): parsed once, here.

Job: :func:`parse_id` (text or a JSON number to an id, or ``None``), :func:`id_argument` (the
same for an argparse argument), :func:`parse_scope` / :func:`scope_argument` for ``owner`` and
``user:<discord id>``. The CLI, the web routes and the model's tools all use them.

Invariant: an id is 1-19 ASCII digits, from 1 to ``MAX_ID`` (SQLite's largest INTEGER), or a
JSON integer in that range (not a bool). ``٣``, ``1_0``, `` 5``, ``5\\n`` and ``2**63`` are
refused here, never handed to SQLite (where they are an OverflowError, not a missing row).
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable

MAX_ID = 2**63 - 1
_DIGITS = re.compile(r"[0-9]{1,19}")


def parse_id(raw: object) -> int | None:
    """``raw`` (a string of digits, or an int) as an id, or None when it cannot be one."""
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int):
        value = raw
    elif isinstance(raw, str) and _DIGITS.fullmatch(raw):
        value = int(raw)
    else:
        return None
    return value if 1 <= value <= MAX_ID else None


def parse_scope(raw: str) -> str | None:
    """A memory scope: ``owner``, or ``user:<discord id>`` (digits); None when it is neither."""
    if raw == "owner":
        return raw
    kind, sep, user = raw.partition(":")
    return raw if kind == "user" and sep and parse_id(user) is not None else None


def scope_argument(raw: str) -> str:
    """An argparse ``type=`` for ``--scope``: anything else is a usage error (exit 2)."""
    if parse_scope(raw) is None:
        raise argparse.ArgumentTypeError(
            f"{raw!r} is not a scope; give owner or user:<discord id> (e.g. user:1234)"
        )
    return raw


def id_rule(what: str) -> str:
    """The one sentence saying what an id is, for ``what`` ("a memory")."""
    return f"{what} id is a whole number from 1 to {MAX_ID}"


def id_argument(what: str) -> Callable[[str], int]:
    """An argparse ``type=`` for ``what``'s id: a bad one is a usage error (exit 2), one line."""

    def parse(raw: str) -> int:
        value = parse_id(raw)
        if value is None:
            raise argparse.ArgumentTypeError(f"{raw!r}: {id_rule(what)}")
        return value

    parse.__name__ = "id"
    return parse
