"""Luna's data folder: one running Luna per folder, and what the folder says about its database.

Invariants:
- A running Luna (daemon, REPL or web, with everything it runs in-process) holds an exclusive
  ``flock`` on ``<data>/luna.lock`` for its whole life. The kernel drops the lock when the
  process ends, ``kill -9`` included, so a crash never leaves a stale lock to clean up; the file
  itself stays and is reused. A second Luna on the folder is refused with one line naming the
  holder's pid (written into the file once the lock is taken).
- Commands that only read (doctor, stats, memory search/list/stats, config show, backup) never
  take the lock; ``luna restore`` takes it for the swap, so no Luna can start halfway through.
  Data commands also take their own lock, one at a time (``luna.memory.storage.maintenance``).
- :func:`database_signs` lists what shows a database existed here (a saved REPL session, the
  request log, backups, a write-ahead log, held messages); a missing or empty database with such
  signs is refused at open, never silently replaced by an empty one.
- Blocking (small file operations): async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import os
from pathlib import Path

from luna.errors import DataFolderInUseError

LOCK_NAME = "luna.lock"
BACKUPS = "backups"
HELD_NAME = "held_messages.jsonl"  # luna.memory.storage.held keeps messages the database refused


def backups_dir(db_path: Path) -> Path:
    """Where ``luna backup`` and the daily backups write: ``<data>/backups``."""
    return Path(db_path).parent / BACKUPS


def matrix_crypto_file(data_dir: Path) -> Path:
    """The Matrix bot's device keys and sessions (``luna.frontends.matrix.connection``)."""
    return Path(data_dir) / "matrix" / "crypto.db"


# The table of ``matrix_crypto_file`` holding the bot's cross-signing private keys and their
# recovery key (``luna.frontends.matrix.crosssign``; ``luna doctor`` reads it).
MATRIX_CROSS_SIGNING_TABLE = "luna_cross_signing"


def held_file(db_path: Path) -> Path:
    return Path(db_path).parent / HELD_NAME


class InstanceLock:
    """The data folder's lock: held by the one Luna running on it (see the module invariants)."""

    def __init__(self, data_dir: Path) -> None:
        self.path = Path(data_dir) / LOCK_NAME
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self, what: str) -> None:
        """Take the lock for ``what`` (e.g. "repl"); DataFolderInUseError when another has it."""
        if self._fd is not None:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid, holder = _read_holder(self.path)
            raise DataFolderInUseError(
                f"another Luna ({holder}) is running on the data folder {self.path.parent}; "
                "stop it first (quit its REPL, or `systemctl stop luna-agent`), or give this "
                "one its own folder (memory.db_path)",
                pid=pid,
            ) from None
        started = dt.datetime.now().astimezone().isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n{what}\n{started}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def running_pid(data_dir: Path) -> int | None:
    """The pid of the Luna running on ``data_dir`` (0 when it cannot be read), else None."""
    path = Path(data_dir) / LOCK_NAME
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_holder(path)[0] or 0
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def lock_holder_lines(path: Path) -> tuple[int, list[str]] | None:
    """The pid and the other lines a lock file's holder wrote (None: unreadable)."""
    try:
        lines = path.read_text().split("\n")
        return int(lines[0]), lines[1:]
    except (OSError, ValueError, IndexError):
        return None


def _read_holder(path: Path) -> tuple[int | None, str]:
    """(pid, a description like "pid 123, repl since 14:05") from the lock file."""
    held = lock_holder_lines(path)
    if held is None:
        return None, "pid unknown"
    pid, rest = held
    what = rest[0] if rest and rest[0] else "luna"
    since = f" since {rest[1][:19].replace('T', ' ')}" if len(rest) > 1 and rest[1] else ""
    return pid, f"pid {pid}, {what}{since}"


def database_signs(db_path: Path) -> list[str]:
    """What in the data folder shows a database existed at ``db_path`` (for a message)."""
    db_path = Path(db_path)
    folder = db_path.parent
    signs = []
    if (folder / "repl_session").is_file():
        signs.append("a saved REPL session (repl_session)")
    requests = db_path.with_name("requests.db")
    if requests.is_file() and requests.stat().st_size > 0:
        signs.append("the request log (requests.db)")
    if newest_backup(db_path) is not None:
        signs.append(f"backups in {BACKUPS}/")
    wal = Path(f"{db_path}-wal")
    if wal.is_file() and wal.stat().st_size > 0:
        signs.append(f"its write-ahead log ({wal.name})")
    if held_file(db_path).is_file():
        signs.append(f"held messages ({HELD_NAME})")
    return signs


def newest_backup(db_path: Path) -> Path | None:
    """The most recent backup file in the data folder's ``backups/``, if any."""
    folder = backups_dir(db_path)
    try:
        found = [p for p in folder.glob("*.db") if p.is_file()]
    except OSError:
        return None
    return max(found, key=lambda p: p.stat().st_mtime, default=None)


def set_aside(path: Path, label: str) -> list[Path]:
    """Rename ``path`` and its ``-wal``/``-shm`` files to ``<name>.<label>-<time>…``, keeping
    them together (a WAL belongs to its database file); returns the new paths. A name already
    taken gets ``-2``, ``-3``…: an aside file is never overwritten."""
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base, n = f"{path.name}.{label}-{stamp}", 1
    while any(path.with_name(f"{base}{s}").exists() for s in ("", "-wal", "-shm")):
        n += 1  # two in one second: a rename must never replace an earlier aside file
        base = f"{path.name}.{label}-{stamp}-{n}"
    moved = []
    for suffix in ("", "-wal", "-shm"):
        src = Path(f"{path}{suffix}")
        if src.exists():
            dst = src.with_name(f"{base}{suffix}")
            src.rename(dst)
            moved.append(dst)
    return moved
