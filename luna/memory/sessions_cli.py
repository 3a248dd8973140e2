"""``luna sessions …``: list the conversations Luna keeps, forget one, sweep left-over files.

Invariants:
- ``forget`` asks before it deletes when stdin is a terminal, and deletes without asking only
  with ``--yes``; without a terminal and without ``--yes`` it refuses (exit 2), so a script
  never deletes by accident and never hangs on a question.
- Beside a running Luna (``luna.datafolder``) a forget goes through WAL like the other data
  commands, but is refused while that Luna may be in one of the session's turns
  (``luna.memory.storage.forget``); the running Luna's next turn in the session starts fresh.
- Stored text reaches the terminal only through ``neutralize`` (``terminal_json`` for JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from luna import datafolder
from luna.config import Config
from luna.errors import NoSuchSessionError
from luna.memory import browse, sessions
from luna.memory.cli import open_memory
from luna.messages import neutralize, terminal_json

LIST_DEFAULT = 50
TITLE_CHARS = 50


def add_parser(subparsers: Any) -> None:
    """Add ``sessions`` and its subcommands to the top-level CLI."""
    p = subparsers.add_parser(
        "sessions",
        help="list the conversations Luna keeps, or forget one with its files",
        description=(
            "Every conversation (the REPL, the web page, a chat, a scheduled task) is a "
            "session in Luna's database. `forget` deletes one with everything that came from "
            "it: its messages, their search index, its summary, the memories learned in it, "
            "its files (unless another session uses the same file) and its requests in the "
            "request log. Backups keep their copies until they rotate out."
        ),
    )
    sub = p.add_subparsers(dest="sessions_command", required=True, metavar="COMMAND")

    ls = sub.add_parser("list", help="sessions, most recently active first")
    ls.add_argument(
        "-n", "--limit", type=int, default=LIST_DEFAULT, help=f"how many (default {LIST_DEFAULT})"
    )
    ls.add_argument("--json", action="store_true", help="one JSON line per session")
    ls.set_defaults(handler=list_cmd)

    f = sub.add_parser(
        "forget",
        help="delete a session and everything that came from it",
        description=(
            "Delete session ID: its messages, their search index and vectors, its summary, "
            "the memories learned in it (unless --keep-memories), the descriptions of its "
            "images, its attachment files that no other session uses, and its requests in "
            "the request log, in one transaction. Asks first on a terminal. Refused while a "
            "running Luna is in one of the session's turns; after a forget, that Luna's next "
            "message in the session starts a fresh conversation. Scheduled tasks made in the "
            "session keep running (`luna schedule list`, `luna schedule cancel`)."
        ),
    )
    f.add_argument("id", metavar="ID", help="session id (see `luna sessions list`)")
    f.add_argument("-y", "--yes", action="store_true", help="do not ask (for scripts)")
    f.add_argument(
        "--keep-memories",
        action="store_true",
        help="keep the memories learned in the session (they stay searchable)",
    )
    f.set_defaults(handler=forget_cmd)

    sw = sub.add_parser(
        "sweep",
        help="delete attachment files no message refers to (older than a day)",
        description=(
            "Delete the files in the data folder's attachments/ that no message refers to "
            "and that were last taken in more than a day ago (a newer one may belong to a "
            "message on its way in). `luna doctor` counts them."
        ),
    )
    sw.set_defaults(handler=sweep_cmd)


async def list_cmd(args: argparse.Namespace, cfg: Config) -> int:
    async with open_memory(cfg) as mem:
        rows = await browse.list_sessions(mem, max(1, args.limit))
    if args.json:
        for r in rows:
            print(terminal_json(r))
        return 0
    if not rows:
        print("(no sessions)")
        return 0
    width = max(len(r["id"]) for r in rows)
    print(f"{'ID':<{width}}  {'FRONT-END':<9}  {'LAST (UTC)':<16}  MESSAGES  FILES  FIRST LINE")
    for r in rows:
        last = str(r["last_at"] or r["created_at"] or "")[:16].replace("T", " ")
        title = r["title"][:TITLE_CHARS]
        print(
            neutralize(
                f"{r['id']:<{width}}  {r['frontend']:<9}  {last:<16}  {r['messages']:>8}  "
                f"{r['files']:>5}  {title}"
            )
        )
    return 0


async def _confirmed(question: str) -> bool:
    answer = await asyncio.to_thread(input, question)
    return answer.strip().lower() in ("y", "yes")


async def forget_cmd(args: argparse.Namespace, cfg: Config) -> int:
    running = await asyncio.to_thread(datafolder.running_pid, cfg.data_dir)
    async with open_memory(cfg) as mem:
        seen = await sessions.footprint(mem, args.id)
        if seen is None:  # said first: a typo is not a question of --yes
            raise NoSuchSessionError(f"no session {args.id!r} (see `luna sessions list`)")
        if not args.yes and not sys.stdin.isatty():
            print(
                f"luna sessions forget: not asked on a terminal; add --yes to forget {args.id!r}",
                file=sys.stderr,
            )
            return 2
        if not args.yes:
            print(neutralize(sessions.footprint_text(seen)))
            if args.keep_memories and seen.memories:
                print("(its memories are kept: --keep-memories)")
            try:
                if not await _confirmed("Forget it? This cannot be undone. [y/N] "):
                    print("kept")
                    return 1
            except EOFError:
                print("\nkept")
                return 1
        outcome = await sessions.forget_session(
            mem,
            args.id,
            keep_memories=args.keep_memories,
            turn_may_run=running is not None,
            turn_timeout=cfg.agent.turn_timeout,
            outputs_dir=cfg.tools.outputs_dir,
        )
    print(neutralize(sessions.outcome_text(outcome)))
    return 1 if outcome.requests_error else 0


async def sweep_cmd(args: argparse.Namespace, cfg: Config) -> int:
    async with open_memory(cfg) as mem:
        removed, newer = await sessions.sweep(mem)
    note = f" ({newer:,} newer than a day left)" if newer else ""
    print(f"removed {removed:,} file(s) no message refers to{note}")
    return 0
