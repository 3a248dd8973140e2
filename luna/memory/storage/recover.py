"""``luna db recover``: what is readable in a damaged database, salvaged into a new sound one.

Invariants:
- The damaged file is only read: it is copied (with its write-ahead log) into a scratch folder,
  the log folded in there, and the copy read page by page (:mod:`luna.memory.storage.salvage`).
- A file that is not a SQLite database (wrong header) and has no row to salvage is refused:
  there is nothing to recover, and an empty "salvaged" file would only mislead.
- The result is a new file, never written over an existing one: built as a temp file with the
  full current schema (the migrations), checked with ``integrity_check``, fsynced, renamed.
- Its base tables (``BASE_TABLES``) get every salvaged row that fits the table (its columns'
  types and constraints, checked by inserting it); an orphan leaf page goes to the one table
  all of its rows fit, or is left out when none or several do. Ids are kept, and
  ``sqlite_sequence`` too, so an id a lost row had is never given again.
- Rows of a table a later migration folded into another (``m014``: Matrix's ``matrix_sync``
  token and ``matrix_taken`` events, now the channel ledger's) go where that migration put
  them, so a file damaged before the upgrade keeps them too.
- Derived tables are rebuilt, never copied: ``docs`` and ``docs_fts`` from the messages,
  memories and summaries, as the log writes them; vectors are left to the indexer (every doc
  ``embedded = 0``: embedded when Luna next starts on the file).
- The report counts each table's rows against the original's count when the damaged file can
  still count them, else against the highest id it ever gave (``sqlite_sequence``).
- Blocking; the CLI runs it in a worker thread.
"""

from __future__ import annotations

import os
import secrets
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from luna.errors import DatabaseCorruptError, MemoryStoreError
from luna.memory.storage import db, session_log
from luna.memory.storage.backup import check_file
from luna.memory.storage.maintenance import SCRATCH_PREFIX, TMP_PREFIX, MaintenanceLock
from luna.memory.storage.salvage import Salvage, read_file
from luna.memory.storage.store import Store

BASE_TABLES = (
    "meta",
    "sessions",
    "messages",
    "memories",
    "summaries",
    "scheduled_tasks",
    "task_runs",
    "deliveries",
    "session_heads",
    "hook_events",
    "message_attachments",
    "image_descriptions",
    "channel_cursors",
    "channel_turns",
)
SQLITE_HEADER = b"SQLite format 3\x00"
REPORTED = ("messages", "memories", "sessions", "summaries", "scheduled_tasks")


@dataclass(frozen=True)
class TableCount:
    name: str
    recovered: int
    original: int | None  # None: the damaged file could not say
    original_is_ids: bool  # the original is the highest id ever given, not a count


@dataclass(frozen=True)
class RecoverReport:
    output: Path
    tables: list[TableCount]
    damaged_pages: int
    orphan_pages_used: int
    orphan_pages_left: int
    wal_folded: bool
    seconds: float


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    notnull: bool
    is_rowid: bool  # INTEGER PRIMARY KEY: stored as NULL in the record, the rowid is the value


def recover(source: Path, output: Path, lock: MaintenanceLock | None = None) -> RecoverReport:
    """Salvage ``source`` into ``output`` (see the module invariants).

    The caller holds the data commands' ``lock``; the scratch folder and the temp file are
    tracked there, so a ``kill -9`` leaves nothing the next command does not remove."""
    started = time.monotonic()
    source, output = Path(source), Path(output)
    if not source.is_file():
        raise MemoryStoreError(f"there is no database at {source}")
    if output.exists():
        raise MemoryStoreError(f"{output} already exists; give another --output")
    output.parent.mkdir(parents=True, exist_ok=True)
    scratch = output.parent / f"{SCRATCH_PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
    tmp = output.with_name(f"{TMP_PREFIX}{output.name}")
    if lock is not None:
        lock.track(scratch)
        lock.track(tmp)
    scratch.mkdir(mode=0o700)
    try:
        copy, folded = _scratch_copy(source, scratch)
        found = read_file(copy)
        if not _has_sqlite_header(source) and not any(found.rows.values()) and not found.orphans:
            raise DatabaseCorruptError(
                f"{source} is not a SQLite database and holds nothing to salvage; give the "
                "damaged luna.db (or restore a backup: `luna restore FILE`)"
            )
        originals = _original_counts(copy, found)
        used, left = _build(found, tmp)
        check_file(tmp)
        tmp.rename(output)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        for leftover in (tmp, Path(f"{tmp}-wal"), Path(f"{tmp}-shm")):
            leftover.unlink(missing_ok=True)
    recovered = _counts(output)
    tables = [
        TableCount(t, recovered.get(t, 0), *originals.get(t, (None, False))) for t in REPORTED
    ]
    return RecoverReport(
        output, tables, len(found.bad_pages), used, left, folded, time.monotonic() - started
    )


def _has_sqlite_header(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(16) == SQLITE_HEADER


def _scratch_copy(source: Path, scratch: Path) -> tuple[Path, bool]:
    """Copy the file and its WAL, and fold the WAL into the copy; (copy, whether folded)."""
    copy = scratch / "damaged.db"
    shutil.copyfile(source, copy)
    wal = Path(f"{source}-wal")
    if not wal.is_file() or wal.stat().st_size == 0:
        return copy, False
    shutil.copyfile(wal, Path(f"{copy}-wal"))
    try:
        conn = db.sqlite3.connect(str(copy))
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.close()
        return copy, True
    except db.Error:  # page 1 itself is unreadable: read the main file as it is
        for extra in ("-wal", "-shm"):
            Path(f"{copy}{extra}").unlink(missing_ok=True)
        return copy, False


def _original_counts(copy: Path, found: Salvage) -> dict[str, tuple[int | None, bool]]:
    """Each reported table's row count in the damaged file, else its highest id ever given."""
    out: dict[str, tuple[int | None, bool]] = {}
    sequence = {
        values[0]: values[1]
        for values in found.rows.get("sqlite_sequence", {}).values()
        if len(values) >= 2 and isinstance(values[0], str) and isinstance(values[1], int)
    }
    try:
        conn = db.sqlite3.connect(f"{copy.resolve().as_uri()}?mode=ro", uri=True)
    except db.Error:
        conn = None
    for table in REPORTED:
        count: int | None = None
        if conn is not None:
            try:
                count = int(conn.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0])
            except db.Error:
                count = None
        if count is not None:
            out[table] = (count, False)
        elif table in sequence:
            out[table] = (int(sequence[table]), True)
    if conn is not None:
        conn.close()
    return out


def _columns(conn: Any, table: str) -> list[Column]:
    rows = conn.execute(f'PRAGMA table_info("{table}")').fetchall()
    pks = [r for r in rows if r[5]]
    rowid_pk = len(pks) == 1 and str(pks[0][2]).upper() == "INTEGER"
    return [Column(r[1], str(r[2]).upper(), bool(r[3]), rowid_pk and bool(r[5])) for r in rows]


def _source_columns(found: Salvage, table: str) -> list[str] | None:
    """The damaged file's own column order for ``table`` (None when its schema is lost)."""
    sql = next((s for k, n, _r, s in found.schema if k == "table" and n == table and s), None)
    if sql is None:
        return None
    probe = db.sqlite3.connect(":memory:")
    try:
        probe.execute(sql)
        return [r[1] for r in probe.execute(f'PRAGMA table_info("{table}")')]
    except db.Error:
        return None
    finally:
        probe.close()


def _as_record(values: list[Any], rowid: int, names: list[str] | None, cols: list[Column]):
    """A salvaged row as {column: value} of the new table, or None when it cannot be one."""
    names = names or [c.name for c in cols]
    if len(values) > len(names):
        return None
    record = dict(zip(names, values, strict=False))
    out: dict[str, Any] = {}
    for col in cols:
        value = rowid if col.is_rowid else record.get(col.name)
        if not _fits(value, col):
            return None
        if col.name in record or col.is_rowid:
            out[col.name] = value
    return out


def _fits(value: Any, col: Column) -> bool:
    if value is None:
        return not col.notnull or col.is_rowid
    if "INT" in col.type:
        return isinstance(value, int)
    if "TEXT" in col.type:
        return isinstance(value, str)
    if "BLOB" in col.type:
        return isinstance(value, bytes)
    return True


def _build(found: Salvage, tmp: Path) -> tuple[int, int]:
    """Write the new database; returns (orphan pages used, orphan pages left out)."""
    store = Store(tmp, load_vec=False)
    try:
        store.migrate()
        conn = store.conn
        tables = [  # real tables only: a virtual one (FTS) would take rows of any shape
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
                "AND sql NOT LIKE 'CREATE VIRTUAL TABLE%'"
            )
        ]
        cols = {t: _columns(conn, t) for t in tables}
        conn.execute("PRAGMA foreign_keys = OFF")  # a lost session row must not drop messages
        claimed, used, left = _claim_orphans(found, conn, cols)
        with store.transaction() as tx:
            for table in BASE_TABLES:
                names = _source_columns(found, table)
                rows = dict(claimed.get(table, {}))
                rows.update(found.rows.get(table, {}))  # a row reached by the walk wins
                for rowid in sorted(rows):
                    record = _as_record(rows[rowid], rowid, names, cols[table])
                    if record:
                        marks = ",".join("?" * len(record))
                        quoted = ",".join(f'"{c}"' for c in record)
                        tx.execute(
                            f'INSERT OR IGNORE INTO "{table}" ({quoted}) VALUES ({marks})',
                            list(record.values()),
                        )
            _fold_older_tables(tx, found)
            _restore_sequence(tx, found)
            _orphan_sessions(tx)
            _reindex(store, tx)
        conn.execute("PRAGMA foreign_keys = ON")
        conn.execute("PRAGMA journal_mode = DELETE")  # one self-contained file; Luna sets WAL
        return used, left
    finally:
        store.close()


def _claim_orphans(
    found: Salvage, conn: Any, cols: dict[str, list[Column]]
) -> tuple[dict[str, dict[int, list[Any]]], int, int]:
    """Give each orphan page to the one table every row of it fits (types and constraints)."""
    claimed: dict[str, dict[int, list[Any]]] = {}
    used = left = 0
    for page in found.orphans:
        fits = []
        for table, columns in cols.items():
            names = [c.name for c in columns]
            records = [_as_record(v, rowid, names, columns) for rowid, v in page]
            if all(records) and _constraints_hold(conn, table, records):
                fits.append(table)
        if len(fits) == 1:
            claimed.setdefault(fits[0], {}).update(page)
            used += 1
        else:
            left += 1
    return claimed, used, left


def _constraints_hold(conn: Any, table: str, records: list[Any]) -> bool:
    """Whether every record passes the table's CHECK and NOT NULL constraints."""
    conn.execute("SAVEPOINT probe")
    try:
        for record in records:
            marks = ",".join("?" * len(record))
            quoted = ",".join(f'"{c}"' for c in record)
            conn.execute(
                f'INSERT OR REPLACE INTO "{table}" ({quoted}) VALUES ({marks})',
                list(record.values()),
            )
        return True
    except db.Error:
        return False
    finally:
        conn.execute("ROLLBACK TO probe")
        conn.execute("RELEASE probe")


def _older_rows(found: Salvage, table: str, wanted: tuple[str, ...]) -> list[tuple[str, ...]]:
    """The salvaged rows of a table the current schema no longer has: ``wanted`` columns,
    text all (a row with anything else is not one of its rows)."""
    names = _source_columns(found, table)
    if names is None or not set(wanted) <= set(names):
        return []
    out = []
    for values in found.rows.get(table, {}).values():
        row = dict(zip(names, values, strict=False))
        picked = [row.get(name) for name in wanted]
        if all(isinstance(v, str) for v in picked):
            out.append(tuple(str(v) for v in picked))
    return out


def _fold_older_tables(tx: Any, found: Salvage) -> None:
    """What ``m014_channel_turns_answered`` moved, moved the same way."""
    sync = _older_rows(found, "matrix_sync", ("user_id", "next_batch", "updated_at"))
    for user, token, at in sync:
        tx.execute(
            "INSERT OR IGNORE INTO channel_cursors (channel, account, cursor, updated_at) "
            "VALUES ('matrix', ?, ?, ?)",
            (user, token, at),
        )
    taken = _older_rows(found, "matrix_taken", ("user_id", "event_id", "created_at"))
    for user, event, at in taken:
        tx.execute(
            "INSERT OR IGNORE INTO channel_turns (channel, account, event_id, message_id, event, "
            "created_at, answered_at) VALUES ('matrix', ?, ?, 0, '{}', ?, ?)",
            (user, event, at, at),
        )


def _restore_sequence(tx: Any, found: Salvage) -> None:
    for values in found.rows.get("sqlite_sequence", {}).values():
        if len(values) >= 2 and isinstance(values[0], str) and isinstance(values[1], int):
            if values[0] not in BASE_TABLES:
                continue
            tx.execute(
                "UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = ?",
                (values[1], values[0]),
            )
            tx.execute(
                "INSERT INTO sqlite_sequence (name, seq) SELECT ?, ? "
                "WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = ?)",
                (values[0], values[1], values[0]),
            )


def _orphan_sessions(tx: Any) -> None:
    """A session row that was lost is made again from its messages (and summary)."""
    tx.execute(
        "INSERT OR IGNORE INTO sessions (id, scope, created_at) "
        "SELECT session_id, min(scope), min(created_at) FROM messages GROUP BY session_id"
    )
    tx.execute(
        "INSERT OR IGNORE INTO sessions (id, scope, created_at) "
        "SELECT session_id, 'owner', created_at FROM summaries"
    )


def _reindex(store: Store, tx: Any) -> None:
    """``docs`` and ``docs_fts`` again, from the texts, in the order they were written."""
    for mid, session, role, content, scope, created in tx.execute(
        "SELECT id, session_id, role, content, scope, created_at FROM messages ORDER BY id"
    ).fetchall():
        files = session_log.attachments_of(tx, mid)
        if files:
            notes = session_log.descriptions(tx, files)
            text = session_log.searchable_text(content or "", files, notes)
            store.index_doc(tx, "message", mid, scope, created, text, thread=session)
        elif role in ("user", "assistant") and content and content.strip():
            store.index_doc(tx, "message", mid, scope, created, content, thread=session)
    for mid, text, source, speaker, scope, session, created in tx.execute(
        "SELECT id, text, source, speaker, scope, session_id, created_at FROM memories ORDER BY id"
    ).fetchall():
        thread = session if source == "import" else None
        store.index_doc(tx, "memory", mid, scope, created, text, thread=thread, speaker=speaker)
    for sid, text, updated, scope in tx.execute(
        "SELECT s.id, s.text, s.updated_at, coalesce(x.scope, 'owner') FROM summaries s "
        "LEFT JOIN sessions x ON x.id = s.session_id ORDER BY s.id"
    ).fetchall():
        store.index_doc(tx, "summary", sid, scope, updated, text)


def _counts(path: Path) -> dict[str, int]:
    conn = db.sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        return {t: int(conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]) for t in REPORTED}
    finally:
        conn.close()
