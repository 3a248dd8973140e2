"""``luna backup``, ``luna restore`` and ``luna db recover``: the ways back for the database.

Invariants:
- ``backup`` works while Luna runs (SQLite's online backup API: :mod:`luna.memory.storage.backup`);
  it never takes the running Luna's lock.
- ``backup``, ``restore`` and ``db recover`` each hold the data commands' lock
  (:mod:`luna.memory.storage.maintenance`): a second one on the folder is refused in one line while
  the first works, and temp copies a killed one left are removed first, and said.
- ``restore`` refuses while a Luna runs on the folder, and holds the folder's lock for the
  swap so none can start halfway; it checks the file first (``integrity_check``, a Luna
  database) and never deletes the current database: it is renamed aside, and the line says
  where.
- ``db recover`` only reads the damaged file and writes a new one; it says how much came back.
- Every failure is one line on stderr and a non-zero exit; the blocking work runs in a thread.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from luna import datafolder
from luna.config import Config
from luna.errors import DataFolderInUseError, LunaError
from luna.memory.storage import backup, maintenance

T = TypeVar("T")


def add_parser(subparsers: Any) -> None:
    """Register ``backup``, ``restore`` and ``db recover`` on the top-level CLI."""
    b = subparsers.add_parser(
        "backup",
        help="copy the database to a backup file (works while Luna runs)",
        description="Make a consistent copy of the memory database with SQLite's online "
        "backup API, check it with PRAGMA integrity_check, and print its size and message "
        "count. Safe while Luna is running.",
    )
    b.add_argument(
        "file",
        nargs="?",
        type=Path,
        help="where to write it (default: data/backups/luna-<UTC time>.db)",
    )
    b.set_defaults(handler=backup_cmd)

    r = subparsers.add_parser(
        "restore",
        help="put a backup (or a recovered file) back as the database (Luna must be stopped)",
        description="Replace the memory database with FILE after checking it. Refused while "
        "a Luna runs on this data folder. The current database is renamed aside "
        "(luna.db.before-restore-<time>), never deleted.",
    )
    r.add_argument("file", type=Path, help="a backup from data/backups/, or a recovered file")
    r.set_defaults(handler=restore_cmd)

    d = subparsers.add_parser("db", help="database repair: `luna db recover`")
    sub = d.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    rec = sub.add_parser(
        "recover",
        help="salvage what is readable from a damaged database into a new file",
        description="Read a damaged database page by page and write every readable message, "
        "memory, summary and scheduled task into a new, checked database; the search index "
        "is rebuilt, vectors follow at the next start. The damaged file is not changed. "
        "Then `luna restore` the new file.",
    )
    rec.add_argument(
        "source", nargs="?", type=Path, help="the damaged file (default: the configured database)"
    )
    rec.add_argument(
        "--output",
        "-o",
        type=Path,
        help="the new file (default: data/recovered-<UTC time>.db; must not exist)",
    )
    rec.set_defaults(handler=recover_cmd)


def _size(n: int) -> str:
    size = float(n)
    for unit in ("bytes", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} bytes"  # pragma: no cover


def _locked(cfg: Config, what: str, job: Callable[..., T], *args: Any) -> T:
    """``job(*args, lock=...)`` under the data commands' lock (``luna.memory.storage.maintenance``);
    what a killed earlier command left is removed first, and said on stderr."""
    with maintenance.held(cfg.data_dir, what) as (lock, leftovers):
        if leftovers.paths:
            print(leftovers.line(), file=sys.stderr)
        return job(*args, lock=lock)


async def backup_cmd(args: argparse.Namespace, cfg: Config) -> int:
    if args.file is not None and backup.folder_missing(cfg.memory.db_path, args.file):
        print(
            f"luna backup: there is no folder {args.file.parent}; create it first", file=sys.stderr
        )
        return 2
    try:
        result = await asyncio.to_thread(
            _locked, cfg, "backup", backup.make_backup, cfg.memory.db_path, args.file
        )
    except LunaError as e:
        print(f"luna backup: {e}", file=sys.stderr)
        return 1
    print(
        f"backed up {cfg.memory.db_path} to {result.path}: {_size(result.size)}, "
        f"{result.messages} messages, {result.memories} memories ({result.seconds:.2f} s)"
    )
    files = result.files
    if files is not None and (files.copied or files.present or files.missing):
        print(
            f"attachments in {result.path.parent / 'attachments'}: {files.copied} copied, "
            f"{files.present} already there"
        )
    if files is not None and files.missing:
        print(
            f"luna backup: {files.missing} attachments the log refers to are missing or "
            "damaged in the data folder (see `luna doctor`)",
            file=sys.stderr,
        )
    return 0


def _restore(cfg: Config, source: Path, *, lock: maintenance.MaintenanceLock) -> backup.Restored:
    """With the data commands' lock held: refuse while a Luna runs, else swap the file."""
    instance = datafolder.InstanceLock(cfg.data_dir)
    try:
        instance.acquire("restore")
    except DataFolderInUseError as e:
        raise DataFolderInUseError(
            f"Luna is running on this data folder (pid {e.pid or 'unknown'}); stop it first: "
            "the database cannot be swapped under a running Luna",
            pid=e.pid,
        ) from None
    try:
        return backup.restore_file(cfg.memory.db_path, source, lock)
    finally:
        instance.release()


async def restore_cmd(args: argparse.Namespace, cfg: Config) -> int:
    db_path = cfg.memory.db_path
    try:
        done = await asyncio.to_thread(_locked, cfg, "restore", _restore, cfg, args.file)
    except LunaError as e:
        print(f"luna restore: {e}", file=sys.stderr)
        return 1
    print(
        f"restored {db_path} from {args.file}: {done.messages} messages, {done.memories} memories"
    )
    files = done.files
    if files is not None and (files.copied or files.missing):
        print(f"attachments: {files.copied} copied back, {files.present} already there")
    if files is not None and files.missing:
        print(
            f"luna restore: {files.missing} attachments it refers to are not beside "
            f"{args.file} (in {args.file.parent / 'attachments'}); their messages stay, the "
            "files are gone",
            file=sys.stderr,
        )
    if done.aside:
        print(f"the previous database is kept as {done.aside[0]}")
    else:
        print("there was no previous database to keep")
    held = datafolder.held_file(db_path)
    if held.exists():
        print(f"note: messages held in {held} are written to it when Luna next starts")
    return 0


async def recover_cmd(args: argparse.Namespace, cfg: Config) -> int:
    from luna.memory.storage.recover import recover

    source = args.source or cfg.memory.db_path
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%d-%H%M%SZ")
    output = args.output or cfg.data_dir / f"recovered-{stamp}.db"
    try:
        report = await asyncio.to_thread(_locked, cfg, "db recover", recover, source, output)
    except LunaError as e:
        print(f"luna db recover: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"luna db recover: {e.strerror or e}: {e.filename or source}", file=sys.stderr)
        return 1
    notes = [f"{report.damaged_pages} unreadable page(s) skipped"]
    if report.orphan_pages_used:
        notes.append(f"{report.orphan_pages_used} cut-off page(s) re-attached by their rows")
    if report.orphan_pages_left:
        notes.append(f"{report.orphan_pages_left} cut-off page(s) left out (shape unclear)")
    print(f"salvaged {source} into {report.output} in {report.seconds:.1f} s ({'; '.join(notes)})")
    for t in report.tables:
        if t.original is None:
            of = "(the damaged file cannot say how many it had)"
        elif t.original_is_ids:
            of = f"of at most {t.original} (ids given)"
        else:
            of = f"of {t.original}"
        lost = (
            f", {t.original - t.recovered} lost" if t.original and t.original > t.recovered else ""
        )
        print(f"  {t.name:<16} {t.recovered} {of}{lost}")
    print(
        "Keyword search works on it now; vectors are recomputed when Luna next starts on it.\n"
        f"To use it (with Luna stopped): luna restore {report.output}"
    )
    return 0
