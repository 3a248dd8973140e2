"""The one SQLite connection helper: pysqlite3, WAL, durability levels, sqlite-vec.

Invariants:
- Every Luna database connection comes from :func:`connect`; nothing else imports a SQLite
  binding. pysqlite3 is used because this Python's stdlib ``sqlite3`` cannot load extensions.
- Connections are in WAL mode with ``synchronous=NORMAL``; ``isolation_level=None`` — callers
  open transactions explicitly. In WAL mode every committed transaction survives ``kill -9`` of
  the process (its frames are in the WAL file, in the OS page cache, when COMMIT returns), at
  any ``synchronous`` level. Power loss or an OS crash is another matter: only a commit with
  ``synchronous=FULL`` (the WAL is fsynced before COMMIT returns) or a later fsync of the WAL
  (:meth:`luna.memory.storage.store.Store.sync`) makes a commit survive it; the WAL is append-only,
  so one fsync covers every commit before it. ``Store.transaction(durable=True)`` is the FULL
  commit; the store module says which writes use which.
- sqlite-vec is loaded on every connection. When it cannot load, the failure is logged at ERROR
  level and as a ``memory_op`` event, and ``conn.vector_enabled`` is False; it never fails
  silently. :func:`check_features` reports the same facts for ``luna doctor``.
- Connections are plain blocking objects: async callers use them via ``asyncio.to_thread``.
- SQLite's errors are told apart by their result code (``sqlite_errorcode``), never by their
  text: :func:`is_busy` (another connection holds the lock) and :func:`is_damage` (a corrupt
  page, or a file that is not a database). :func:`damage_error` words the one line a damaged
  database gets everywhere, with what to do next.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from luna.errors import DatabaseCorruptError, MemoryStoreError
from luna.observe import log_event

if TYPE_CHECKING:  # pysqlite3 ships no types; it is the stdlib module's C source, newer
    import sqlite3
else:
    try:  # pragma: no branch - import shape depends on the platform
        import pysqlite3.dbapi2 as sqlite3
    except ImportError:  # pragma: no cover - non-Linux fallback; may lack extension loading
        import sqlite3

log = logging.getLogger(__name__)

DEFAULT_BUSY_TIMEOUT_S = 10.0
# SQLite primary result codes (https://sqlite.org/rescode.html); extended codes share them in
# their low byte.
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_CORRUPT = 11
SQLITE_NOTADB = 26
NOT_A_DATABASE = "file is not a database"  # what quick_check reports for SQLITE_NOTADB

Error = sqlite3.Error
IntegrityError = sqlite3.IntegrityError
OperationalError = sqlite3.OperationalError


class Connection(sqlite3.Connection):
    """A SQLite connection that knows whether sqlite-vec is loaded."""

    vector_enabled: bool = False
    vector_error: str = ""


@dataclass(frozen=True)
class DBFeatures:
    """What this SQLite build can do; shown by ``luna doctor``."""

    sqlite_version: str
    fts5: bool
    fts5_error: str
    sqlite_vec: str | None  # version string, or None when it cannot load
    sqlite_vec_error: str

    @property
    def vector_enabled(self) -> bool:
        return self.sqlite_vec is not None


def error_code(exc: BaseException) -> int:
    """The primary SQLite result code of ``exc`` (0 when it carries none)."""
    return (getattr(exc, "sqlite_errorcode", 0) or 0) & 0xFF


def is_busy(exc: BaseException) -> bool:
    """Another connection (maybe another program) holds the lock this call needed."""
    return error_code(exc) in (SQLITE_BUSY, SQLITE_LOCKED)


def is_damage(exc: BaseException) -> bool:
    """The file has a corrupt page, or is not a SQLite database at all."""
    return error_code(exc) in (SQLITE_CORRUPT, SQLITE_NOTADB)


def first_problem(report: str) -> str:
    """The first problem in an ``integrity_check``/``quick_check`` report, with how many more
    there are: a report is many lines in one row ("*** in database main ***", "Page 42: never
    used", ...), and a person needs one line."""
    lines = [ln.strip() for ln in report.splitlines() if ln.strip()]
    lines = [ln for ln in lines if not ln.startswith("*** in database")] or lines or [report]
    more = f"; {len(lines) - 1} more in the log" if len(lines) > 1 else ""
    return f"{lines[0]}{more}"


def damage_error(path: Path | str, exc: BaseException | str) -> DatabaseCorruptError:
    """The one line for a damaged database: what happened and the two ways back."""
    path = Path(path)
    not_a_db = exc == NOT_A_DATABASE or (
        not isinstance(exc, str) and error_code(exc) == SQLITE_NOTADB
    )
    what = "is not a SQLite database" if not_a_db else f"is damaged ({first_problem(str(exc))})"
    backups = path.parent / "backups"
    return DatabaseCorruptError(
        f"the database {path} {what}; Luna will not write to it. Salvage what is readable "
        f"with `luna db recover`, or go back to a backup with `luna restore FILE` (with Luna "
        f"stopped; backups are in {backups})"
    )


def inserted_id(cur: sqlite3.Cursor) -> int:
    """The rowid the INSERT ``cur`` ran just made (``lastrowid``, which sqlite3 leaves None
    only when no row was inserted)."""
    if cur.lastrowid is None:
        raise MemoryStoreError("an INSERT made no row")
    return cur.lastrowid


def _load_vec(conn: Connection) -> None:
    try:
        import sqlite_vec

        conn.enable_load_extension(True)
        try:
            sqlite_vec.load(conn)
        finally:
            conn.enable_load_extension(False)
        conn.vector_enabled = True
        conn.vector_error = ""
    except Exception as exc:  # any failure means FTS-only, reported loudly
        conn.vector_enabled = False
        conn.vector_error = f"{type(exc).__name__}: {exc}"
        log.error(
            "sqlite-vec could not be loaded (%s): memory recall runs FTS-only, without vectors",
            conn.vector_error,
        )
        log_event("memory_op", op="vec_load_failed", error=conn.vector_error)


def connect(
    path: Path | str,
    *,
    busy_timeout_s: float = DEFAULT_BUSY_TIMEOUT_S,
    load_vec: bool = True,
) -> Connection:
    """Open ``path`` (creating its folder) in WAL mode with sqlite-vec loaded if possible."""
    try:
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(
            str(path),
            timeout=busy_timeout_s,
            isolation_level=None,
            check_same_thread=False,
            factory=Connection,
        )
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
    except sqlite3.Error as exc:
        if is_damage(exc):
            raise damage_error(path, exc) from exc
        raise MemoryStoreError(f"cannot open database {path}: {exc}") from exc
    except OSError as exc:
        raise MemoryStoreError(f"cannot open database {path}: {exc}") from exc
    if load_vec:
        _load_vec(conn)
    else:
        conn.vector_error = "sqlite-vec loading disabled"
    return conn


def check_features() -> DBFeatures:
    """Probe FTS5 and sqlite-vec on an in-memory database (for ``luna doctor``)."""
    conn = sqlite3.connect(":memory:", factory=Connection)
    try:
        fts5, fts5_error = True, ""
        try:
            conn.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61')")
        except sqlite3.Error as exc:
            fts5, fts5_error = False, str(exc)
        _load_vec(conn)
        version = None
        if conn.vector_enabled:
            version = conn.execute("SELECT vec_version()").fetchone()[0]
        return DBFeatures(
            sqlite_version=sqlite3.sqlite_version,
            fts5=fts5,
            fts5_error=fts5_error,
            sqlite_vec=version,
            sqlite_vec_error=conn.vector_error,
        )
    finally:
        conn.close()


def quick_check(path: Path | str) -> list[str]:
    """``PRAGMA quick_check`` of the file at ``path`` on a connection of its own: the problems
    it lists (empty when the file is sound). A file that is not a database is one problem."""
    try:
        conn = sqlite3.connect(str(path), timeout=DEFAULT_BUSY_TIMEOUT_S, factory=Connection)
    except sqlite3.Error as exc:
        return [NOT_A_DATABASE if error_code(exc) == SQLITE_NOTADB else str(exc)]
    try:
        rows = conn.execute("PRAGMA quick_check").fetchall()
    except sqlite3.Error as exc:
        return [NOT_A_DATABASE if error_code(exc) == SQLITE_NOTADB else str(exc)]
    finally:
        conn.close()
    problems = [str(r[0]) for r in rows]
    return [] if problems == ["ok"] else problems
