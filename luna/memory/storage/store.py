"""The memory database: one SQLite file, ordered named migrations, the vector table, meta.

Invariants:
- Schema changes are ordered, named forward migrations recorded in ``_migrations``; each runs in
  its own transaction and is never edited once released — new changes append a new one.
- ``messages`` is append-only (triggers refuse UPDATE and DELETE; a forgotten session alone is
  deleted whole, by :mod:`luna.memory.storage.forget`).
- Every searchable text (user/assistant message, memory, session summary) has one row in
  ``docs`` and one row in ``docs_fts`` with the same rowid, written in the same transaction as
  the text itself; ``docs_vec`` (sqlite-vec, cosine) holds its embedding once computed
  (``docs.embedded = 1``). A doc without a vector is still found by FTS. A doc in a thread
  (session) is embedded with a little of its neighbours' meaning (``doc_raw_vec`` keeps its
  own embedding so the mix can be redone when the next message arrives).
- The embedding model's name and dimension live in ``meta``; a different configured model is
  refused with a message that says to run ``luna memory reindex``. Every vector carries the
  model it was made with (``docs.embed_model``), and a vector of another model than meta's is
  refused (:class:`VectorModelChangedError`): one search never mixes two models. A reindex
  records its model in ``meta`` (``embedding_model`` and ``reindex_model``) before the first
  vector; it is resumed, never restarted, while ``reindex_model`` names the configured one.
- All access goes through one connection guarded by a lock; callers run these blocking methods
  in a worker thread (``asyncio.to_thread``).
- SQLite's errors are translated here, once: a write that cannot get the lock raises
  DatabaseBusyError (after ``BUSY_TIMEOUT_S``, or the wait a caller set for its thread with
  :meth:`Store.waiting`), so no call holds the store's lock for long waiting on another
  program; a corrupt page or a file that is not a database raises
  DatabaseCorruptError and marks the store ``damaged``: from then on every write is refused
  before it starts, so Luna never appends to a damaged file.
- Durability: every commit survives ``kill -9`` (see :mod:`luna.memory.storage.db`). A
  ``transaction(durable=True)`` (the default) also survives power loss once it returns: it
  commits with ``synchronous=FULL``, one fsync of the WAL, which also covers every commit before
  it. ``durable=False`` skips that fsync; it is for rows that are derived or intermediate (a
  turn's context, tool calls and results, vectors) and made durable by the next durable commit
  or :meth:`Store.sync`. ``has_unsynced`` says whether any such commit is still waiting.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import os
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from luna.errors import DatabaseBusyError, MemoryStoreError
from luna.memory.storage import db
from luna.memory.storage.migrations import MIGRATIONS, Migration
from luna.memory.storage.vector_index import (
    RAM_INDEX_MIN_DOCS,
    SMALL_MIRRORS_MAX_BYTES,
    SMALL_SCOPE_MAX_DOCS,
    VectorIndex,
)
from luna.memory.storage.vector_model import VectorModel, VectorModelChangedError
from luna.observe import log_event

log = logging.getLogger(__name__)

# SQLite's own wait for another program's lock, per statement of this store. Short, because
# the store's lock is held meanwhile and every other thread of Luna waits for it; a write that
# may wait longer goes through luna.memory.storage.writes (tries, backoff, memory.lock_wait).
BUSY_TIMEOUT_S = 1.0
NEIGHBOUR_WEIGHT = 0.3  # share of each neighbour's embedding mixed into a threaded doc's vector
CTX_CHARS = 600  # how much of a neighbour's text goes into a doc's FTS context


def now_iso() -> str:
    """The current UTC time as ISO 8601 with milliseconds."""
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


class Store(VectorModel):
    """One SQLite connection plus the lock that serializes its use across threads."""

    def __init__(self, path: Path, *, load_vec: bool = True) -> None:
        self.path = path
        self.conn = db.connect(path, load_vec=load_vec, busy_timeout_s=BUSY_TIMEOUT_S)
        self.lock = threading.RLock()
        self.vector_enabled = self.conn.vector_enabled
        self.vector_error = self.conn.vector_error
        self.dim: int | None = None
        self.model: str | None = None  # the model this process's vectors come from
        self._db_model: str | None = None  # meta's embedding_model as last read
        self.has_unsynced = False  # a durable=False commit has not been fsynced yet
        self.vocab_ready = (
            False  # luna.memory.recall.vocab's scratch tables exist on this connection
        )
        self._doc_count: int | None = None  # docs rows, counted once then kept in step
        self._speakers: dict[str, list[str]] = {}
        self._ram_index: dict[str, VectorIndex | None] = {}
        self._data_version: int | None = None
        self.damaged = ""  # why the file is known to be damaged; then nothing is written
        self._waits = threading.local()  # per thread: the busy wait of its next write

    def _see_other_writers(self) -> None:
        """Drop the caches (doc count, speakers, RAM vector index) when another connection
        committed since the last look (``PRAGMA data_version``): a ``luna memory add`` beside
        the running Luna. Call with the lock held."""
        version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._data_version:
            self._data_version = version
            self._ram_index.clear()
            self._doc_count = None
            self._speakers.clear()
            row = self.conn.execute(
                "SELECT value FROM meta WHERE key = 'embedding_model'"
            ).fetchone()
            self._db_model = row[0] if row else None

    def close(self) -> None:
        with self.lock:
            self.conn.close()

    @contextlib.contextmanager
    def translated(self) -> Iterator[None]:
        """Turn SQLite's busy and damage errors into Luna's (see the module invariants)."""
        try:
            yield
        except db.Error as exc:
            if db.is_damage(exc):
                self.damaged = self.damaged or str(exc)
                log_event("memory_op", op="damaged", error=str(exc))
                raise db.damage_error(self.path, exc) from exc
            if db.is_busy(exc):
                raise DatabaseBusyError(
                    f"another program holds the write lock of {self.path}"
                ) from exc
            raise

    def checked(self, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """``fn(*args, **kw)`` with SQLite's errors translated: for readers that use ``conn``
        directly (search)."""
        with self.translated():
            return fn(*args, **kw)

    def waiting(self, seconds: float, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """``fn(*args, **kw)`` in this thread with each write waiting at most ``seconds`` for
        another connection's lock (then DatabaseBusyError) instead of ``busy_timeout``."""
        self._waits.seconds = seconds
        try:
            return fn(*args, **kw)
        finally:
            self._waits.seconds = None

    @contextlib.contextmanager
    def transaction(self, *, durable: bool = True) -> Iterator[db.Connection]:
        """``BEGIN IMMEDIATE`` … ``COMMIT`` or ``ROLLBACK`` on error.

        ``durable``: the commit fsyncs the WAL (survives power loss, and makes every earlier
        commit survive it too); otherwise it survives ``kill -9`` only, until the next sync.
        Refused (DatabaseCorruptError) once the store is ``damaged``.
        """
        wait = getattr(self._waits, "seconds", None)
        with self.lock, self.translated():
            if self.damaged:
                raise db.damage_error(self.path, self.damaged)
            if wait is not None:
                self.conn.execute(f"PRAGMA busy_timeout = {max(1, int(wait * 1000))}")
            if durable:  # the level may only change outside a transaction
                self.conn.execute("PRAGMA synchronous = FULL")
            try:
                self.conn.execute("BEGIN IMMEDIATE")  # busy: DatabaseBusyError (translated)
                try:
                    yield self.conn
                except BaseException:
                    if self.conn.in_transaction:  # SQLite may have rolled back already
                        self.conn.execute("ROLLBACK")
                    self._ram_index.clear()  # it may hold writes that were just undone
                    self._doc_count = None
                    raise
                self.conn.execute("COMMIT")
            finally:
                if durable:
                    self.conn.execute("PRAGMA synchronous = NORMAL")
                if wait is not None:
                    self.conn.execute(f"PRAGMA busy_timeout = {int(BUSY_TIMEOUT_S * 1000)}")
            self.has_unsynced = not durable

    def sync(self) -> bool:
        """Make every commit so far survive power loss (one fsync of the WAL); False when
        there was nothing to do. Runs beside other work: it does not hold the lock."""
        with self.lock:
            if not self.has_unsynced:
                return False
            self.has_unsynced = False
        try:
            fd = os.open(f"{self.path}-wal", os.O_RDONLY)
        except FileNotFoundError:  # checkpointed and removed: the database file holds it all
            return False
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return True

    def query(self, sql: str, params: tuple | list | dict = ()) -> list[tuple]:
        with self.lock, self.translated():
            return self.conn.execute(sql, params).fetchall()

    # ---- migrations ------------------------------------------------------------------

    def applied_migrations(self) -> list[str]:
        with self.lock, self.translated():
            self.conn.execute(
                "CREATE TABLE IF NOT EXISTS _migrations "
                "(name TEXT PRIMARY KEY, applied_at TEXT NOT NULL)"
            )
            return [r[0] for r in self.conn.execute("SELECT name FROM _migrations ORDER BY rowid")]

    def migrate(self, migrations: list[Migration] | None = None) -> list[str]:
        """Apply the migrations not yet recorded, in order; returns the names applied."""
        migrations = MIGRATIONS if migrations is None else migrations
        done = set(self.applied_migrations())
        applied = []
        for name, statements in migrations:
            if name in done:
                continue
            try:
                with self.transaction() as conn:
                    for sql in statements:
                        conn.execute(sql)
                    conn.execute(
                        "INSERT INTO _migrations (name, applied_at) VALUES (?, ?)",
                        (name, now_iso()),
                    )
            except db.Error as exc:
                raise MemoryStoreError(f"database migration {name} failed: {exc}") from exc
            applied.append(name)
            log_event("memory_op", op="migrate", migration=name)
        return applied

    # ---- the searchable index ---------------------------------------------------------

    def index_doc(
        self,
        conn: db.Connection,
        kind: str,
        ref_id: int,
        scope: str,
        created_at: str,
        text: str,
        *,
        thread: str | None = None,
        speaker: str | None = None,
    ) -> int:
        """Add or refresh one searchable text inside the caller's transaction.

        With a ``thread`` (session), the previous doc of that thread and this one get each
        other's text as FTS context.
        """
        row = conn.execute(
            "SELECT id FROM docs WHERE kind = ? AND ref_id = ?", (kind, ref_id)
        ).fetchone()
        if row is not None:
            self.unindex_doc(conn, row[0])
        cur = conn.execute(
            "INSERT INTO docs (kind, ref_id, scope, created_at, thread, speaker) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            (kind, ref_id, scope, created_at, thread, speaker),
        )
        doc_id = db.inserted_id(cur)
        if self._doc_count is not None:
            self._doc_count += 1
        ctx = ""
        if thread is not None:
            prev = self._thread_before(conn, thread, kind, doc_id)
            if prev is not None:
                prev_text = self._fts_text(conn, prev)
                ctx = prev_text[:CTX_CHARS]
                before = self._thread_before(conn, thread, kind, prev)
                prev_ctx = self._fts_text(conn, before)[:CTX_CHARS] if before else ""
                conn.execute(
                    "UPDATE docs_fts SET ctx = ? WHERE rowid = ?",
                    (f"{prev_ctx}\n{text[:CTX_CHARS]}".strip(), prev),
                )
        conn.execute(
            "INSERT INTO docs_fts (rowid, text, ctx) VALUES (?, ?, ?)", (doc_id, text, ctx)
        )
        if speaker:
            self._speakers.pop(scope, None)
        return doc_id

    @staticmethod
    def _thread_before(conn: db.Connection, thread: str, kind: str, doc_id: int) -> int | None:
        row = conn.execute(
            "SELECT id FROM docs WHERE thread = ? AND kind = ? AND id < ? ORDER BY id DESC LIMIT 1",
            (thread, kind, doc_id),
        ).fetchone()
        return int(row[0]) if row else None

    @staticmethod
    def _fts_text(conn: db.Connection, doc_id: int) -> str:
        row = conn.execute("SELECT text FROM docs_fts WHERE rowid = ?", (doc_id,)).fetchone()
        return str(row[0]) if row else ""

    def unindex_doc(self, conn: db.Connection, doc_id: int) -> None:
        conn.execute("DELETE FROM docs_fts WHERE rowid = ?", (doc_id,))
        if self.vector_enabled and self.dim is not None:
            conn.execute("DELETE FROM docs_vec WHERE rowid = ?", (doc_id,))
            for index in self._ram_index.values():
                if index is not None:
                    index.remove(doc_id)
        conn.execute("DELETE FROM doc_raw_vec WHERE doc_id = ?", (doc_id,))
        if conn.execute("DELETE FROM docs WHERE id = ?", (doc_id,)).rowcount:
            if self._doc_count is not None:
                self._doc_count -= 1

    def drop_caches(self) -> None:
        """Forget the doc count, speakers and RAM vector mirrors (after a bulk delete)."""
        with self.lock:
            self._ram_index.clear()
            self._doc_count = None
            self._speakers.clear()

    def doc_count(self) -> int:
        """Searchable docs, counted once, then kept in step by this store's writes (and
        counted again after another process's)."""
        with self.lock:
            self._see_other_writers()
            if self._doc_count is None:
                self._doc_count = int(self.conn.execute("SELECT count(*) FROM docs").fetchone()[0])
            return self._doc_count

    def speakers_seen(self, scope: str) -> list[str]:
        return self._speakers.get(scope, [])  # what speakers() last found: no I/O, maybe stale

    def speakers(self, scope: str) -> list[str]:
        """Distinct speaker names recorded in ``scope`` (cached until a new one is indexed)."""
        with self.lock:
            self._see_other_writers()
            if scope not in self._speakers:
                rows = self.conn.execute(
                    "SELECT DISTINCT speaker FROM docs WHERE scope = ? AND speaker IS NOT NULL",
                    (scope,),
                ).fetchall()
                self._speakers[scope] = [r[0] for r in rows if r[0]]
            return self._speakers[scope]

    def store_vectors(self, rows: list[tuple[int, str, bytes]]) -> None:
        """Write (doc id, scope, float32 bytes) embeddings and mark the docs embedded.

        A doc in a thread is stored as its own embedding plus ``NEIGHBOUR_WEIGHT`` × each
        neighbour's (previous and next doc of the thread), renormalized; its neighbours'
        vectors are refreshed the same way.
        """
        if not self.vector_enabled or not rows:
            return
        with self.transaction(durable=False) as conn:  # derived: recomputed if ever lost
            row = conn.execute("SELECT value FROM meta WHERE key = 'embedding_model'").fetchone()
            stored = row[0] if row else None
            if self.model is not None and stored not in (None, self.model):
                raise VectorModelChangedError(
                    f"the memory database's vectors are now {stored!r}'s (a reindex), not "
                    f"{self.model!r}'s: vectors of {self.model!r} are no longer stored"
                )
            self.model = self.model or stored
            refresh: set[int] = set()
            for doc_id, scope, blob in rows:
                row = conn.execute(
                    "SELECT thread, kind FROM docs WHERE id = ?", (doc_id,)
                ).fetchone()
                if row is None:  # forgotten while it was being embedded
                    continue
                if row[0] is None:
                    self._write_vec(conn, doc_id, scope, blob)
                    continue
                conn.execute(
                    "INSERT OR REPLACE INTO doc_raw_vec (doc_id, embedding) VALUES (?, ?)",
                    (doc_id, blob),
                )
                refresh.add(doc_id)
                refresh.update(n for n in self._neighbours(conn, row[0], row[1], doc_id) if n)
            for doc_id in sorted(refresh):
                self._refresh_mixed(conn, doc_id)

    def _write_vec(self, conn: db.Connection, doc_id: int, scope: str, blob: bytes) -> None:
        index = self._ram_index.get(scope)
        if index is not None:
            index.upsert(doc_id, np.frombuffer(blob, dtype=np.float32))
        conn.execute("DELETE FROM docs_vec WHERE rowid = ?", (doc_id,))
        conn.execute(
            "INSERT INTO docs_vec (rowid, embedding, scope) VALUES (?, ?, ?)",
            (doc_id, blob, scope),
        )
        conn.execute(
            "UPDATE docs SET embedded = 1, embed_model = ? WHERE id = ?", (self.model, doc_id)
        )

    def _neighbours(
        self, conn: db.Connection, thread: str, kind: str, doc_id: int
    ) -> tuple[int | None, int | None]:
        prev = self._thread_before(conn, thread, kind, doc_id)
        row = conn.execute(
            "SELECT id FROM docs WHERE thread = ? AND kind = ? AND id > ? ORDER BY id LIMIT 1",
            (thread, kind, doc_id),
        ).fetchone()
        return prev, (int(row[0]) if row else None)

    def ram_index(self, scope: str) -> VectorIndex | None:
        """The numpy mirror of a scope's vectors: a large scope's, and a small one's while the
        small mirrors fit their budget (:mod:`luna.memory.storage.vector_index`); None: the
        scope is searched with sqlite-vec."""
        with self.lock:
            self._see_other_writers()
            if scope not in self._ram_index:
                n = self.conn.execute(
                    "SELECT count(*) FROM docs WHERE scope = ? AND embedded = 1", (scope,)
                ).fetchone()[0]
                index = None
                if self.dim is not None and (n >= RAM_INDEX_MIN_DOCS or self._small_fits(n)):
                    index = VectorIndex(self.dim, capacity=n + 64)
                    for doc_id, blob in self.conn.execute(
                        "SELECT rowid, embedding FROM docs_vec WHERE scope = ?", (scope,)
                    ):
                        index.upsert(int(doc_id), np.frombuffer(blob, dtype=np.float32))
                    index.fit()
                    log_event(
                        "memory_op",
                        op="ram_index_built",
                        count=len(index),
                        sketch=index.basis is not None,
                    )
                self._ram_index[scope] = index
            return self._ram_index[scope]

    def _small_fits(self, n: int) -> bool:
        """A scope of ``n`` docs is small and its mirror fits in the budget beside every mirror
        held (a large scope's counts too: it is rare, and then RAM is spent already)."""
        if n > SMALL_SCOPE_MAX_DOCS or self.dim is None:
            return False
        held = sum(len(i) for i in self._ram_index.values() if i is not None)
        return (held + n) * 4 * self.dim <= SMALL_MIRRORS_MAX_BYTES

    def _refresh_mixed(self, conn: db.Connection, doc_id: int) -> None:
        row = conn.execute(
            "SELECT d.thread, d.kind, d.scope, r.embedding FROM docs d "
            "JOIN doc_raw_vec r ON r.doc_id = d.id WHERE d.id = ?",
            (doc_id,),
        ).fetchone()
        if row is None:
            return
        thread, kind, scope, blob = row
        vec = np.frombuffer(blob, dtype=np.float32).copy()
        for n in self._neighbours(conn, thread, kind, doc_id):
            if n is None:
                continue
            raw = conn.execute(
                "SELECT embedding FROM doc_raw_vec WHERE doc_id = ?", (n,)
            ).fetchone()
            if raw is not None:
                vec += NEIGHBOUR_WEIGHT * np.frombuffer(raw[0], dtype=np.float32)
        norm = float(np.linalg.norm(vec)) or 1.0
        self._write_vec(conn, doc_id, scope, (vec / norm).astype(np.float32).tobytes())

    def counts(self) -> dict[str, int]:
        q: Callable[[str], int] = lambda sql: int(self.query(sql)[0][0])  # noqa: E731
        return {
            "sessions": q("SELECT count(*) FROM sessions"),
            "messages": q("SELECT count(*) FROM messages"),
            "memories": q("SELECT count(*) FROM memories"),
            "superseded": q("SELECT count(*) FROM memories WHERE superseded_by IS NOT NULL"),
            "summaries": q("SELECT count(*) FROM summaries"),
            "indexed": q("SELECT count(*) FROM docs"),
            "embedded": q("SELECT count(*) FROM docs WHERE embedded = 1"),
        }

    def stats(self) -> dict[str, Any]:
        """:meth:`counts`, the file's size and the vectors' model: ``luna memory stats``."""
        return {
            **self.counts(),
            "db_path": str(self.path),
            "db_bytes": self.path.stat().st_size if self.path.exists() else 0,
            "embedding_model": self.get_meta("embedding_model"),
            "embedding_dim": self.get_meta("embedding_dim"),
        }
