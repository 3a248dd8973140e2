"""Attachments go with a backup: the files a database refers to, copied beside the backup file.

A backup ``X.db`` keeps its attachments in ``X.parent/attachments/`` with the data folder's own
layout (``ab/<sha256>``): every backup in a folder shares it, and a file is stored there once
however many backups refer to it. ``luna restore X.db`` copies back the files the restored
database refers to that the data folder lacks.

Invariants:
- Only files a database refers to (``message_attachments``) are copied; each copy is checked
  against its hash and written atomically (``luna.attachments.store``), so a backup's file is
  whole and right, or absent and counted missing.
- Nothing is deleted from the data folder. ``prune`` deletes from a backups folder only the
  files no backup database left in it refers to (after rotation).
- A database from before attachments (no such table) refers to none.
- Blocking; called inside the backup and restore commands' thread.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from luna.attachments.store import AttachmentStore, attachments_dir
from luna.errors import AttachmentMissingError
from luna.memory.storage import db


@dataclass(frozen=True)
class Copied:
    copied: int  # files written now
    present: int  # files already there
    missing: int  # referenced, but the source has no sound copy


def referenced(db_file: Path) -> set[str]:
    """The content hashes a database's messages refer to."""
    conn = db.sqlite3.connect(f"{Path(db_file).resolve().as_uri()}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT DISTINCT sha256 FROM message_attachments").fetchall()
    except db.Error:
        return set()  # a database from before attachments
    finally:
        conn.close()
    return {str(sha) for (sha,) in rows}


def _copy(hashes: Iterable[str], source: AttachmentStore, target: AttachmentStore) -> Copied:
    copied = present = missing = 0
    for sha in sorted(hashes):
        if target.verify(sha) is None:
            present += 1
            continue
        try:
            target.write(source.read(sha))
        except AttachmentMissingError:
            missing += 1
            continue
        copied += 1
    return Copied(copied, present, missing)


def copy_out(data_dir: Path, backup_file: Path) -> Copied:
    """Copy the attachments ``backup_file`` refers to from the data folder beside it."""
    source = AttachmentStore(attachments_dir(data_dir))
    target = AttachmentStore(attachments_dir(Path(backup_file).parent))
    return _copy(referenced(backup_file), source, target)


def copy_in(backup_file: Path, data_dir: Path, db_file: Path) -> Copied:
    """Copy the attachments the restored ``db_file`` refers to from beside ``backup_file``."""
    source = AttachmentStore(attachments_dir(Path(backup_file).parent))
    target = AttachmentStore(attachments_dir(data_dir))
    return _copy(referenced(db_file), source, target)


def prune(backups: Path) -> int:
    """Delete the files in ``backups/attachments`` that no ``*.db`` there refers to."""
    store = AttachmentStore(attachments_dir(backups))
    wanted: set[str] = set()
    for backup_file in Path(backups).glob("*.db"):
        with contextlib.suppress(db.Error, OSError):
            wanted |= referenced(backup_file)
    return store.remove(sha for sha in list(store.hashes()) if sha not in wanted)
