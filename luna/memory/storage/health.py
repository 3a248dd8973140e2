"""Before the database opens: is it there, and is it sound?

Invariants:
- A missing or empty (0-byte) database where the data folder shows one existed
  (:func:`luna.datafolder.database_signs`) is refused with one line that says how to restore
  the newest backup or start over deliberately (``--fresh-database``); never silently replaced
  by an empty one. A deliberate fresh start sets the old write-ahead log aside first, so its
  frames are never replayed into the new file.
- :func:`check_sound` runs ``PRAGMA quick_check``; a file that fails it is refused
  (DatabaseCorruptError, worded by :func:`luna.memory.storage.db.damage_error`) before anything
  writes.
- Blocking; ``Memory.open`` calls these in a worker thread.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from luna import datafolder
from luna.errors import DatabaseMissingError
from luna.memory.storage import db
from luna.observe import log_event

log = logging.getLogger(__name__)


def check_present(db_path: Path, *, fresh: bool = False) -> None:
    """Refuse a missing or empty database where the data folder shows one existed."""
    path = Path(db_path)
    if path.exists() and path.stat().st_size > 0:
        return
    signs = datafolder.database_signs(path)
    if not signs:
        return  # a first start: the database is created
    if fresh:
        moved = datafolder.set_aside(path, "before-fresh")
        log.warning("memory: starting a fresh database; set aside: %s", moved)
        log_event("memory_op", op="fresh_database", count=len(moved))
        return
    state = "is empty (0 bytes)" if path.exists() else "is missing"
    newest = datafolder.newest_backup(path)
    back = (
        f"restore the newest backup with `luna restore {newest}`"
        if newest is not None
        else "put the file back if it was moved (there is no backup)"
    )
    raise DatabaseMissingError(
        f"the database {path} {state}, but the data folder shows Luna kept one there "
        f"({', '.join(signs)}); {back}, or start over deliberately with "
        "`luna --fresh-database` (an empty database; the old files are set aside)"
    )


def check_sound(db_path: Path) -> None:
    """``PRAGMA quick_check``; DatabaseCorruptError when the file fails it."""
    if not Path(db_path).exists():
        return
    started = time.monotonic()
    problems = db.quick_check(db_path)
    ms = (time.monotonic() - started) * 1000
    report = "\n".join(problems)  # the whole report goes to the log, one line to the person
    log_event(
        "memory_op", op="quick_check", duration_ms=round(ms, 1), count=len(problems),
        problems=report[:20_000] if problems else None,
    )  # fmt: skip
    if problems:
        raise db.damage_error(db_path, report)
