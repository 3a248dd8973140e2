"""One data command at a time per data folder, and the temp copies a killed one leaves behind.

Job: :class:`MaintenanceLock`, held by ``luna backup``, ``luna restore``, ``luna db recover``
and the running Luna's daily backup for as long as they write; :func:`clean_leftovers`, which
removes what such a command left when it was killed.

Invariants:
- The lock is an exclusive ``flock`` on ``<data>/luna.maintenance.lock``, apart from the
  running Luna's own ``luna.lock`` (``luna.datafolder``), so a backup still works beside a
  running Luna, but two data commands never overlap: the second is refused at once with one
  line naming the first (its pid and command). The kernel drops the lock with the process,
  ``kill -9`` included.
- The holder writes every temp path it creates into the lock file (:meth:`track`) before it
  creates it. Whoever takes the lock next knows those were left by a holder that died, and
  removes them; so does a scan of the data folder and its ``backups/`` for the names these
  commands use (``.tmp-*.db`` with its ``-wal``/``-shm``/``-journal``, ``.recover-*`` folders).
  Nothing else is ever removed: only names starting ``.tmp-`` or ``.recover-``.
- Blocking (small file operations): async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import logging
import os
import shutil
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from luna import datafolder
from luna.errors import DataFolderInUseError
from luna.observe import log_event

log = logging.getLogger(__name__)

LOCK_NAME = "luna.maintenance.lock"
TMP_PREFIX = ".tmp-"
SCRATCH_PREFIX = ".recover-"
_TRACKED = "tmp "


@dataclass(frozen=True)
class Leftovers:
    """What :func:`clean_leftovers` removed."""

    paths: list[Path]
    size: int  # bytes

    def line(self) -> str:
        """One line for the person, or "" when nothing was left."""
        if not self.paths:
            return ""
        names = ", ".join(p.name for p in self.paths[:3]) + (", …" if len(self.paths) > 3 else "")
        return (
            f"note: removed {len(self.paths)} temp copy(ies) left by a backup, restore or "
            f"recover that was killed ({self.size / 1e6:.1f} MB: {names})"
        )


class MaintenanceLock:
    """The data folder's lock for data commands (see the module invariants)."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = Path(data_dir)
        self.path = self.data_dir / LOCK_NAME
        self._fd: int | None = None

    def acquire(self, what: str) -> Leftovers:
        """Take the lock for ``what`` ("backup"), then clean what a killed holder left.

        DataFolderInUseError when another data command holds it."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            pid, holder = _holder(self.path)
            raise DataFolderInUseError(
                f"another data command ({holder}) is working on {self.data_dir}; "
                "wait for it to finish, then run this again",
                pid=pid,
            ) from None
        tracked = _tracked(self.path)
        started = dt.datetime.now().astimezone().isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"{os.getpid()}\n{what}\n{started}\n".encode())
        self._fd = fd
        return clean_leftovers(self.data_dir, tracked)

    def track(self, path: Path) -> None:
        """Note ``path`` (about to be created) so a next holder removes it if we die."""
        if self._fd is not None:
            os.write(self._fd, f"{_TRACKED}{Path(path).resolve()}\n".encode())

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)  # nothing left to clean: the holder finished
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


def _holder(path: Path) -> tuple[int | None, str]:
    held = datafolder.lock_holder_lines(path)
    if held is None:
        return None, "pid unknown"
    pid, rest = held
    what = rest[0] if rest and rest[0] else "a data command"
    return pid, f"pid {pid}, luna {what}"


def _tracked(path: Path) -> list[Path]:
    try:
        lines = path.read_text(errors="replace").split("\n")
    except OSError:
        return []
    return [Path(line[len(_TRACKED) :]) for line in lines if line.startswith(_TRACKED)]


def _is_ours(path: Path) -> bool:
    return path.name.startswith((TMP_PREFIX, SCRATCH_PREFIX))


def clean_leftovers(data_dir: Path, tracked: Iterable[Path] = ()) -> Leftovers:
    """Remove the temp copies of killed data commands (call only with the lock held)."""
    data_dir = Path(data_dir)
    found: set[Path] = {p for p in tracked if _is_ours(p)}
    for folder in (data_dir, datafolder.backups_dir(data_dir / "luna.db")):
        with contextlib.suppress(OSError):
            found.update(folder.glob(f"{TMP_PREFIX}*.db*"))
            found.update(p for p in folder.glob(f"{SCRATCH_PREFIX}*") if p.is_dir())
    for p in list(found):  # a tracked database takes its -wal/-shm/-journal with it
        found.update(Path(f"{p}{s}") for s in ("-wal", "-shm", "-journal"))
    removed, size = [], 0
    for path in sorted(found):
        try:
            if path.is_dir() and not path.is_symlink():
                size += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                size += path.lstat().st_size
                path.unlink()
            else:
                continue
        except OSError as exc:
            log.warning("maintenance: could not remove the leftover %s: %s", path, exc)
            continue
        removed.append(path)
    if removed:  # the person gets Leftovers.line(); the log gets every path
        log.info("maintenance: removed leftovers of a killed data command: %s", removed)
        log_event("memory_op", op="leftovers_removed", count=len(removed), bytes=size,
                  paths=[str(p) for p in removed])  # fmt: skip
    return Leftovers(removed, size)


@contextlib.contextmanager
def held(data_dir: Path, what: str) -> Iterator[tuple[MaintenanceLock, Leftovers]]:
    """``with held(folder, "backup") as (lock, leftovers):`` the lock for one command."""
    lock = MaintenanceLock(data_dir)
    leftovers = lock.acquire(what)
    try:
        yield lock, leftovers
    finally:
        lock.release()


def clean_at_start(data_dir: Path) -> Leftovers:
    """At Luna's start: clean what killed data commands left, unless one is running now."""
    try:
        with held(data_dir, "start") as (_lock, leftovers):
            return leftovers
    except DataFolderInUseError:
        return Leftovers([], 0)
