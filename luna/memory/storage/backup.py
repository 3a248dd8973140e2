"""Backups of the memory database: ``luna backup``, the daily ones, and checking a backup file.

Invariants:
- A backup is made with SQLite's online backup API from a read-only connection of its own
  (never the store's), in one step: a consistent snapshot of the last commit, taken while Luna
  goes on writing (in WAL mode the copy only reads; writers are never blocked).
- It is written to a temp file in the target folder, switched to a single self-contained file
  (``journal_mode=DELETE``), checked with ``PRAGMA integrity_check``, fsynced, and only then
  renamed into place (the folder fsynced too): a visible backup is complete and sound. A copy
  that fails the check replaces nothing, is deleted, and raises DatabaseCorruptError (the
  source is damaged).
- Daily backups are ``backups/luna-auto-<UTC time>.db``; after a new one is in place the
  oldest beyond ``memory.backups_keep`` are deleted. Backups made by hand (``luna backup``,
  ``luna-<UTC time>.db`` by default) are never deleted by Luna.
- :func:`restore_file` checks a file the same way before it becomes the database, and renames
  the current database aside (with its ``-wal``/``-shm``), never deleting it.
- Writing a backup, restoring and the daily backup hold the data commands' lock
  (``luna.memory.storage.maintenance``): one at a time per folder, and their temp files are tracked.
- The attachments a backup's database refers to are copied beside it, and back at a restore
  (``luna.memory.storage.backup_files``); so is the Matrix crypto store, the bot's device
  keys and sessions (``luna.memory.storage.backup_crypto``).
- Blocking; async callers use ``asyncio.to_thread`` (:class:`DailyBackups` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path

from luna import datafolder
from luna.errors import DatabaseCorruptError, DataFolderInUseError, MemoryStoreError
from luna.memory.storage import backup_crypto, backup_files, db
from luna.memory.storage.backup_crypto import CryptoCopy
from luna.memory.storage.backup_files import Copied
from luna.memory.storage.maintenance import TMP_PREFIX, MaintenanceLock, held
from luna.observe import log_event

log = logging.getLogger(__name__)

AUTO_PREFIX = "luna-auto-"
DAY_S = 86_400.0
CHECK_EVERY_S = 3600.0  # the daily timer looks this often whether a backup is due


@dataclass(frozen=True)
class BackupResult:
    path: Path
    size: int  # bytes
    messages: int
    memories: int
    seconds: float
    files: Copied | None = None  # the attachments copied beside it (backup_files)
    crypto: CryptoCopy | None = None  # the Matrix crypto store copied beside it


def stamp(now: dt.datetime | None = None) -> str:
    return (now or dt.datetime.now(dt.UTC)).strftime("%Y%m%d-%H%M%SZ")


def default_target(db_path: Path, *, auto: bool = False) -> Path:
    prefix = AUTO_PREFIX if auto else "luna-"
    return datafolder.backups_dir(db_path) / f"{prefix}{stamp()}.db"


def folder_missing(db_path: Path, target: Path) -> bool:
    """Whether ``target``'s folder does not exist and is not Luna's own ``backups/`` (which is
    made when needed): a typo in a path is refused, never made into new folders."""
    parent = Path(target).parent
    return not parent.is_dir() and parent.resolve() != datafolder.backups_dir(db_path).resolve()


def make_backup(
    db_path: Path,
    target: Path | None = None,
    *,
    auto: bool = False,
    lock: MaintenanceLock | None = None,
) -> BackupResult:
    """Back ``db_path`` up to ``target`` (default: a timestamped file in ``backups/``).

    The caller holds the data folder's ``lock`` (``luna.memory.storage.maintenance``); its temp
    file is tracked there, so a ``kill -9`` leaves nothing the next command does not remove."""
    db_path = Path(db_path)
    if not db_path.is_file() or db_path.stat().st_size == 0:
        raise MemoryStoreError(f"there is no database to back up at {db_path}")
    if target is not None and folder_missing(db_path, target):
        raise MemoryStoreError(f"there is no folder {Path(target).parent}; create it first")
    target = Path(target) if target is not None else default_target(db_path, auto=auto)
    if target.exists():
        raise MemoryStoreError(f"{target} already exists; give another file name")
    target.parent.mkdir(parents=True, exist_ok=True)  # Luna's own backups/ folder
    tmp = target.with_name(f"{TMP_PREFIX}{target.name}")
    if lock is not None:
        lock.track(tmp)
    started = time.monotonic()
    try:
        _copy(db_path, tmp)
        problems = _integrity(tmp)
        if problems:  # a page copy of a damaged file: the source is damaged
            raise db.damage_error(db_path, f"its copy fails integrity_check: {problems[0]}")
        messages, memories = check_file(tmp)
        _fsync(tmp)
        tmp.rename(target)
        _fsync(target.parent)
    finally:
        tmp.unlink(missing_ok=True)
    files = backup_files.copy_out(db_path.parent, target)
    crypto = backup_crypto.copy_out(db_path.parent, target, lock)
    took = time.monotonic() - started
    result = BackupResult(target, target.stat().st_size, messages, memories, took, files, crypto)
    log_event(
        "memory_op", op="backup", duration_ms=round(took * 1000, 1), count=messages, auto=auto
    )
    return result


def _copy(source: Path, tmp: Path) -> None:
    """One-step online backup of ``source`` into ``tmp`` (a single file, no WAL)."""
    src = db.sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
    try:
        dst = db.sqlite3.connect(str(tmp))
        try:
            try:
                src.backup(dst)  # all pages in one step: one consistent snapshot
            except db.Error as exc:
                if db.is_damage(exc):
                    raise db.damage_error(source, exc) from exc
                raise MemoryStoreError(f"cannot back up {source}: {exc}") from exc
            dst.execute("PRAGMA journal_mode = DELETE")
        finally:
            dst.close()
    finally:
        src.close()


def check_file(path: Path) -> tuple[int, int]:
    """``PRAGMA integrity_check`` of a Luna database file; (messages, memories) in it.

    DatabaseCorruptError when it fails or is not a database; MemoryStoreError when it is a
    sound SQLite file that is not Luna's."""
    try:
        problems = _integrity(path)
        if problems:
            raise DatabaseCorruptError(f"{path} fails PRAGMA integrity_check ({problems[0]})")
        conn = db.sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        try:
            tables = {
                r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            }
            if not {"messages", "memories", "_migrations"} <= tables:
                raise MemoryStoreError(f"{path} is a SQLite file but not a Luna database")
            messages = int(conn.execute("SELECT count(*) FROM messages").fetchone()[0])
            memories = int(conn.execute("SELECT count(*) FROM memories").fetchone()[0])
            return messages, memories
        finally:
            conn.close()
    except db.Error as exc:
        what = "is not a SQLite database" if db.error_code(exc) == db.SQLITE_NOTADB else (
            f"cannot be read ({exc})"
        )  # fmt: skip
        raise DatabaseCorruptError(f"{path} {what}") from exc


def _integrity(path: Path) -> list[str]:
    """What ``PRAGMA integrity_check`` finds wrong with ``path`` (empty: sound)."""
    try:
        conn = db.sqlite3.connect(f"{Path(path).resolve().as_uri()}?mode=ro", uri=True)
        try:
            rows = [str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall()]
        finally:
            conn.close()
    except db.Error as exc:
        if db.error_code(exc) == db.SQLITE_NOTADB:
            raise DatabaseCorruptError(f"{path} is not a SQLite database") from exc
        return [str(exc)]
    return [] if rows == ["ok"] else rows


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Restored:
    messages: int
    memories: int
    aside: list[Path]
    files: Copied | None = None  # the attachments copied back (backup_files)
    crypto: CryptoCopy | None = None  # the Matrix crypto store put back


def restore_file(db_path: Path, source: Path, lock: MaintenanceLock | None = None) -> Restored:
    """Check ``source``, set the current database aside, put a copy of ``source`` in place.

    The caller holds the data folder's locks (the running Luna's and the data commands')."""
    if source.resolve() == db_path.resolve():
        raise MemoryStoreError(f"{source} is the database itself; give a backup file")
    if not source.is_file():
        raise MemoryStoreError(f"there is no file {source}")
    check_file(source)
    tmp = db_path.with_name(f"{TMP_PREFIX}restore-{db_path.name}")
    if lock is not None:
        lock.track(tmp)
    tmp.unlink(missing_ok=True)
    try:
        _copy(source, tmp)  # the online backup API reads a WAL-mode source whole
        messages, memories = check_file(tmp)
        _fsync(tmp)
        aside = datafolder.set_aside(db_path, "before-restore")
        os.replace(tmp, db_path)
        _fsync(db_path.parent)
    finally:
        tmp.unlink(missing_ok=True)
    files = backup_files.copy_in(source, db_path.parent, db_path)
    crypto = backup_crypto.copy_in(source, db_path.parent, lock)
    return Restored(messages, memories, aside, files, crypto)


def auto_backups(db_path: Path) -> list[Path]:
    """The daily backups, oldest first (names sort by time)."""
    folder = datafolder.backups_dir(db_path)
    return sorted(folder.glob(f"{AUTO_PREFIX}*.db")) if folder.is_dir() else []


def rotate(db_path: Path, keep: int) -> list[Path]:
    """Delete the oldest daily backups beyond ``keep``; returns what was deleted."""
    stale = auto_backups(db_path)[:-keep] if keep > 0 else []
    for path in stale:
        path.unlink(missing_ok=True)
    if stale:  # the attachments only the deleted backups referred to go too
        backup_files.prune(datafolder.backups_dir(db_path))
        backup_crypto.prune(datafolder.backups_dir(db_path))
    return stale


def is_due(db_path: Path, now: float | None = None) -> bool:
    """A daily backup is due: none yet, or the newest is a day old (and there is content)."""
    existing = auto_backups(db_path)
    if existing and (now or time.time()) - existing[-1].stat().st_mtime < DAY_S:
        return False
    return _has_content(db_path)


def _has_content(db_path: Path) -> bool:
    if not Path(db_path).is_file():
        return False
    conn = db.sqlite3.connect(f"{Path(db_path).resolve().as_uri()}?mode=ro", uri=True)
    try:
        row = conn.execute(
            "SELECT (SELECT count(*) FROM messages) + (SELECT count(*) FROM memories)"
        ).fetchone()
        return bool(row[0])
    except db.Error:
        return False  # the store reports a damaged file; a backup of it is no use
    finally:
        conn.close()


def daily_backup(db_path: Path, keep: int) -> BackupResult | None:
    """One pass of the timer: back up when due, then rotate; None when nothing was due, or
    when another data command (``luna backup``, ``restore``) has the folder: the next pass
    tries again."""
    if not is_due(db_path):
        return None
    try:
        with held(Path(db_path).parent, "daily backup") as (lock, leftovers):
            if leftovers.paths:  # said in the JSON log (leftovers_removed)
                log.info("memory: %s", leftovers.line())
            result = make_backup(db_path, auto=True, lock=lock)
            removed = rotate(db_path, keep)
    except DataFolderInUseError as exc:
        log.info("memory: daily backup postponed: %s", exc)
        return None
    log.info(
        "memory: daily backup %s (%d bytes, %d messages); %d old one(s) removed",
        result.path.name,
        result.size,
        result.messages,
        len(removed),
    )
    return result


class DailyBackups:
    """The running app's backup timer: at start when due, then checked every hour."""

    def __init__(self, db_path: Path, keep: int) -> None:
        self.db_path = Path(db_path)
        self.keep = keep
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self.keep > 0:
            self._task = asyncio.create_task(self._run(), name="daily-backups")

    async def stop(self) -> None:
        """Cancel the timer; a backup in progress finishes (its thread cannot be stopped)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            try:
                await asyncio.to_thread(daily_backup, self.db_path, self.keep)
            except MemoryStoreError as exc:  # a damaged source, a full disk: said, kept going
                log.error("memory: the daily backup failed: %s", exc)
                log_event("memory_op", op="backup_failed", error=str(exc))
            except OSError as exc:
                log.error("memory: the daily backup failed: %s", exc)
                log_event("memory_op", op="backup_failed", error=str(exc))
            await asyncio.sleep(CHECK_EVERY_S)
