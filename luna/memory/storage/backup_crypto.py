"""The Matrix crypto store goes with a backup: the bot's device keys and sessions, copied
beside the backup file and put back at a restore.

A backup ``X.db`` keeps the crypto store (``<data>/matrix/crypto.db``: the device's identity
keys, Olm sessions, Megolm room keys) as ``X.parent/matrix-crypto/X.name``; ``luna restore
X.db`` puts that copy back as the data folder's crypto store. Without it a restored Luna
would have to be a new device, and a new device cannot read what the rooms sent the old one.

Invariants:
- The copy is made with SQLite's online backup API through the stdlib ``sqlite3``: the
  library mautrix's aiosqlite uses, so the running Luna's daily backup never opens the file
  with a second SQLite library in one process (sqlite.org, "How To Corrupt", 2.2.1);
  pysqlite3 never touches it. It is checked (``PRAGMA integrity_check``), fsynced and renamed
  into place: a visible copy is whole.
- Nothing is deleted from the data folder: at a restore the current crypto store (with its
  ``-wal``/``-shm``) is renamed aside (``crypto.db.before-restore-<time>``).
- A restored store keeps its room keys (what was readable stays readable) but loses its
  outbound Megolm sessions: sending on from an older ratchet index would repeat indices the
  rooms already saw (clients call that a replay), so Luna starts new ones and shares them.
- A backup without a crypto copy (no Matrix, or made before this) leaves the data folder's
  crypto store as it is. ``prune`` deletes copies whose backup file is gone.
- Blocking; called inside the backup and restore commands' thread.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from luna import datafolder
from luna.errors import MemoryStoreError
from luna.memory.storage.maintenance import TMP_PREFIX, MaintenanceLock

FOLDER = "matrix-crypto"


@dataclass(frozen=True)
class CryptoCopy:
    path: Path  # where the copy now is
    device_id: str  # the device whose keys it holds ("" when it has no account yet)
    aside: tuple[Path, ...] = ()  # at a restore: the crypto store it replaced


def copy_of(backup_file: Path) -> Path:
    """Where the crypto store of backup ``backup_file`` is kept."""
    return Path(backup_file).parent / FOLDER / Path(backup_file).name


def _device_id(conn: sqlite3.Connection) -> str:
    try:
        row = conn.execute("SELECT device_id FROM crypto_account LIMIT 1").fetchone()
    except sqlite3.Error:
        return ""
    return str(row[0]) if row else ""


def _copy(source: Path, target: Path, lock: MaintenanceLock | None, *, clear_outbound: bool) -> str:
    """Copy ``source`` to ``target`` through a checked, fsynced temp file; its device id."""
    tmp = target.with_name(f"{TMP_PREFIX}{target.name}")
    if lock is not None:
        lock.track(tmp)
    tmp.unlink(missing_ok=True)
    try:
        src = sqlite3.connect(f"{source.resolve().as_uri()}?mode=ro", uri=True, timeout=30)
        try:
            dst = sqlite3.connect(str(tmp))
            try:
                src.backup(dst)  # one step: a consistent snapshot of the last commit
                dst.execute("PRAGMA journal_mode = DELETE")
                rows = [str(r[0]) for r in dst.execute("PRAGMA integrity_check")]
                if rows != ["ok"]:
                    raise MemoryStoreError(f"the copy of {source} fails integrity_check")
                if clear_outbound:
                    with dst:
                        dst.execute("DELETE FROM crypto_megolm_outbound_session")
                device = _device_id(dst)
            finally:
                dst.close()
        finally:
            src.close()
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        tmp.rename(target)
        _fsync_dir(target.parent)
    except sqlite3.Error as e:
        raise MemoryStoreError(f"cannot copy the Matrix crypto store {source}: {e}") from e
    finally:
        tmp.unlink(missing_ok=True)
    return device


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def copy_out(
    data_dir: Path, backup_file: Path, lock: MaintenanceLock | None = None
) -> CryptoCopy | None:
    """Copy the data folder's crypto store beside ``backup_file`` (None: there is none)."""
    source = datafolder.matrix_crypto_file(data_dir)
    if not source.is_file():
        return None
    target = copy_of(backup_file)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    device = _copy(source, target, lock, clear_outbound=False)
    return CryptoCopy(target, device)


def copy_in(
    backup_file: Path, data_dir: Path, lock: MaintenanceLock | None = None
) -> CryptoCopy | None:
    """Put the crypto store kept with ``backup_file`` in place (None: it has none)."""
    source = copy_of(backup_file)
    if not source.is_file():
        return None
    target = datafolder.matrix_crypto_file(data_dir)
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    staged = target.with_name(f"{target.name}.restoring")
    if lock is not None:
        lock.track(staged)
    try:
        device = _copy(source, staged, lock, clear_outbound=True)
        aside = datafolder.set_aside(target, "before-restore")
        os.replace(staged, target)
        _fsync_dir(target.parent)
    finally:
        staged.unlink(missing_ok=True)
    return CryptoCopy(target, device, tuple(aside))


def prune(backups: Path) -> int:
    """Delete the crypto copies in ``backups/matrix-crypto`` whose backup file is gone."""
    folder = Path(backups) / FOLDER
    if not folder.is_dir():
        return 0
    removed = 0
    for copy in folder.glob("*.db"):
        if not (Path(backups) / copy.name).exists():
            copy.unlink(missing_ok=True)
            removed += 1
    return removed
