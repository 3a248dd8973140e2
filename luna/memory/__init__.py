"""Luna's memory: the session log, hybrid recall over everything said, and stored facts.

``Memory`` is the facade the rest of Luna uses (contract in docs/ARCHITECTURE.md).

Invariants:
- One SQLite file holds the session log, the search index, memories and summaries.
- No SQLite or embedding work runs on the event loop: every blocking call goes through
  ``asyncio.to_thread``.
- ``append_message`` is durable when it returns; its vector is computed afterwards by a
  tracked background indexer (FTS finds the message at once, vectors follow). Docs left without
  a vector (crash, FTS-only period) are embedded on the next open.
- FTS-only operation (sqlite-vec missing or the embedding model failing) is logged as a
  warning at start-up, in ``vector_enabled``/``vector_error`` and by ``luna doctor``; it is
  never silent.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from luna.config import MemoryConfig
from luna.errors import MemoryStoreError
from luna.memory import facts, session_log
from luna.memory.embed_worker import EmbeddingProcess
from luna.memory.embeddings import Embedder
from luna.memory.query import plan_query
from luna.memory.search import RecallItem, format_recall, hybrid_search
from luna.memory.store import Store, now_iso
from luna.messages import LoggedMessage, Usage
from luna.observe import Timer, log_event

__all__ = ["Memory", "RecallItem", "format_recall", "normalize_timestamp"]

log = logging.getLogger(__name__)

SOURCES = ("user", "assistant", "tool", "import")
INDEX_BATCH = 128


def normalize_timestamp(value: str) -> str:
    """ISO 8601 text -> UTC ISO 8601 (naive times are taken as UTC); ValueError if invalid."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    when = dt.datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC).isoformat(timespec="milliseconds")


class Memory:
    """Session log + recall + memories over one SQLite database."""

    def __init__(self, cfg: MemoryConfig) -> None:
        self.cfg = cfg
        self.embedder = Embedder.shared(
            cfg.embedding_model, cfg.embedding_dim, cfg.embedding_backend
        )
        self.embed_process = (
            EmbeddingProcess.shared(cfg.embedding_model, cfg.embedding_dim, cfg.embedding_backend)
            if cfg.embedding_process
            else None
        )
        self.vector_enabled = False
        self.vector_error = ""
        self._store: Store | None = None
        self._indexer: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    # ---- lifecycle ---------------------------------------------------------------------

    @property
    def store(self) -> Store:
        if self._store is None:
            raise MemoryStoreError("memory is not open")
        return self._store

    async def open(
        self,
        *,
        allow_model_change: bool = False,
        background: bool = True,
        use_vectors: bool = True,
    ) -> None:
        """Connect, migrate, check the embedding model record, start the vector indexer.

        ``allow_model_change`` skips the model check (used by ``reindex``); ``background=False``
        starts no indexer (one-shot CLI commands call :meth:`flush_index` themselves);
        ``use_vectors=False`` runs FTS-only as if sqlite-vec were missing.
        """
        store = await asyncio.to_thread(Store, self.cfg.db_path, load_vec=use_vectors)
        try:
            await asyncio.to_thread(store.migrate)
            if not allow_model_change:
                await asyncio.to_thread(
                    store.check_embedding_model, self.cfg.embedding_model, self.cfg.embedding_dim
                )
        except BaseException:
            await asyncio.to_thread(store.close)
            raise
        self._store = store
        self.vector_enabled = store.vector_enabled
        self.vector_error = store.vector_error
        if not self.vector_enabled:
            log.warning(
                "memory: sqlite-vec unavailable (%s) — recall is FTS-only (keyword search)",
                self.vector_error,
            )
        log_event("memory_op", op="open", vector_enabled=self.vector_enabled)
        if background and self.vector_enabled and not allow_model_change:
            self._indexer = asyncio.create_task(self._index_loop(), name="memory-indexer")
            self._wake.set()

    async def close(self) -> None:
        if self._indexer is not None:
            self._indexer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._indexer
            self._indexer = None
        if self._store is not None:
            store, self._store = self._store, None
            await asyncio.to_thread(store.close)

    async def warmup(self) -> None:
        """Load the embedding model now (a few seconds) instead of on the first recall."""
        if self.vector_enabled:
            await self._load_embedder()

    async def _load_embedder(self) -> None:
        if self.embed_process is not None:
            await self.embed_process.load()
        else:
            await asyncio.to_thread(self.embedder.load)

    async def _encode(self, texts: list[str], *, is_query: bool = False) -> Any:
        """Vectors for ``texts``, computed in the embedding process (or a worker thread)."""
        if self.embed_process is not None:
            return await self.embed_process.encode(texts, is_query=is_query)
        return await asyncio.to_thread(self.embedder.encode, texts, is_query=is_query)

    def _embedding_failed(self, exc: Exception) -> None:
        self.vector_enabled = False
        self.vector_error = str(exc)
        log.error("memory: embedding model failed (%s) — recall is FTS-only from now on", exc)
        log_event("memory_op", op="embedder_failed", error=str(exc))

    # ---- vector indexer ----------------------------------------------------------------

    async def _index_loop(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                while self.vector_enabled and await self._index_batch():
                    pass
            except MemoryStoreError as exc:
                self._embedding_failed(exc)
            except Exception:  # noqa: BLE001 - keep indexing later; the operator sees the log
                log.exception("memory: vector indexing failed; will retry on the next message")
                await asyncio.sleep(5)

    async def _index_batch(self) -> int:
        pending = await asyncio.to_thread(self.store.pending_docs, INDEX_BATCH)
        if not pending:
            return 0
        vecs = await self._encode([p[2] for p in pending])
        rows = [(p[0], p[1], v.tobytes()) for p, v in zip(pending, vecs, strict=True)]
        await asyncio.to_thread(self.store.store_vectors, rows)
        return len(rows)

    async def flush_index(self, progress: Callable[[int], None] | None = None) -> int:
        """Embed every doc still without a vector, now; returns how many were embedded."""
        total = 0
        while self.vector_enabled:
            n = await self._index_batch()
            if not n:
                break
            total += n
            if progress:
                progress(n)
        return total

    # ---- session log -------------------------------------------------------------------

    async def append_message(
        self,
        session_id: str,
        message: dict,
        *,
        context: str | None = None,
        usage: Usage | None = None,
        scope: str = "owner",
    ) -> int:
        """Append one message durably (committed with synchronous=FULL) and return its id."""
        message_id = await asyncio.to_thread(
            session_log.append_message,
            self.store,
            session_id,
            message,
            context=context,
            usage=usage,
            scope=scope,
        )
        self._wake.set()
        return message_id

    async def set_context(self, message_id: int, context: str) -> None:
        """Attach the per-turn context to an already logged user message (once)."""
        await asyncio.to_thread(session_log.set_context, self.store, message_id, context)

    async def prompt_history(self, session_id: str) -> tuple[str | None, list[LoggedMessage]]:
        """(cumulative summary or None, the messages after the compaction cut, as stored)."""
        return await asyncio.to_thread(session_log.prompt_history, self.store, session_id)

    async def summary(self, session_id: str) -> tuple[str | None, int]:
        """(cumulative summary or None, id of the last message it covers or 0)."""
        return await asyncio.to_thread(session_log.summary, self.store, session_id)

    async def set_summary(self, session_id: str, text: str, cut_message_id: int) -> None:
        """Replace the session's cumulative summary and move its (soft) compaction cut."""
        await asyncio.to_thread(
            session_log.set_summary, self.store, session_id, text, cut_message_id
        )
        self._wake.set()

    async def session_scope(self, session_id: str) -> str:
        """The memory scope the session was logged under ("owner" when unknown)."""
        rows = await asyncio.to_thread(
            self.store.query, "SELECT scope FROM sessions WHERE id = ?", (session_id,)
        )
        return rows[0][0] if rows else "owner"

    async def session_messages(self, session_id: str, after_id: int = 0) -> list[LoggedMessage]:
        """The session's logged messages after ``after_id``, oldest first, as stored."""
        return await asyncio.to_thread(session_log.messages_after, self.store, session_id, after_id)

    # ---- recall ------------------------------------------------------------------------

    async def embed_query(self, query: str) -> bytes | None:
        if not self.vector_enabled or not query.strip():
            return None
        try:
            vec = await self._encode([query], is_query=True)
        except MemoryStoreError as exc:
            self._embedding_failed(exc)
            return None
        return vec[0].tobytes()

    async def recall(
        self,
        query: str,
        *,
        scope: str = "owner",
        session_id: str | None = None,
        k: int | None = None,
    ) -> list[RecallItem]:
        """Hybrid search over messages, memories and summaries visible to ``scope``.

        With ``session_id``, that session's messages still in the prompt view are left out.
        """
        scope_speakers = await asyncio.to_thread(self.store.speakers, scope)
        with Timer() as t:
            plan = plan_query(query, scope_speakers)
            qvec = await self.embed_query(plan.text)
            exclude = None
            if session_id is not None:
                _, cut = await self.summary(session_id)
                exclude = (session_id, cut)
            items = await asyncio.to_thread(
                hybrid_search,
                self.store,
                query,
                qvec,
                scope=scope,
                k=k or self.cfg.recall_k,
                exclude_session=exclude,
                plan=plan,
            )
        log_event("memory_op", op="recall", duration_ms=round(t.ms, 2), count=len(items))
        return items

    # ---- memories ----------------------------------------------------------------------

    async def add_memory(
        self,
        text: str,
        *,
        importance: int = 5,
        source: str = "user",
        scope: str = "owner",
        session_id: str | None = None,
        external_id: str | None = None,
        created_at: str | None = None,
        speaker: str | None = None,
    ) -> int:
        """Store one memory (embedded before it is written) and return its id."""
        ids, _ = await self.add_memories(
            [
                {
                    "text": text,
                    "importance": importance,
                    "source": source,
                    "scope": scope,
                    "session_id": session_id,
                    "id": external_id,
                    "created_at": created_at,
                    "speaker": speaker,
                }
            ]
        )
        if not ids:
            raise MemoryStoreError(f"a memory with id {external_id!r} already exists")
        return ids[0]

    async def add_memories(
        self, records: list[dict[str, Any]], *, vectors: Any = None
    ) -> tuple[list[int], int]:
        """Store a batch of memories; returns (new ids, number skipped as existing ids).

        Each record: ``text`` and optionally ``importance``, ``source``, ``scope``,
        ``session_id``, ``id`` (external id), ``created_at`` (ISO 8601), ``speaker``.
        ``vectors`` (float32 array, one unit row per record, from the configured model) skips
        encoding — for bulk loaders that embedded the texts already.
        """
        for r in records:
            if not str(r.get("text") or "").strip():
                raise MemoryStoreError("a memory needs non-empty text")
            if (r.get("source") or "user") not in SOURCES:
                raise MemoryStoreError(f"memory source must be one of {', '.join(SOURCES)}")
        vecs = vectors
        if vecs is None and self.vector_enabled and records:
            vecs = await self._encode_or_none([r["text"] for r in records])
        return await self._insert_memories(records, vecs)

    async def _encode_or_none(self, texts: list[str]) -> Any:
        if not self.vector_enabled:
            return None
        try:
            return await self._encode(texts)
        except MemoryStoreError as exc:
            self._embedding_failed(exc)
            return None

    async def _insert_memories(
        self, records: list[dict[str, Any]], vecs: Any
    ) -> tuple[list[int], int]:
        with Timer() as t:
            ids, skipped = await asyncio.to_thread(facts.insert_memories, self.store, records, vecs)
        log_event("memory_op", op="add", duration_ms=round(t.ms, 2), count=len(ids))
        return ids, skipped

    async def forget(self, memory_id: int) -> bool:
        """Delete a memory (and its index rows); False when there is no such memory."""

        def run() -> bool:
            store = self.store
            with store.transaction() as conn:
                row = conn.execute(
                    "SELECT id FROM docs WHERE kind = 'memory' AND ref_id = ?", (memory_id,)
                ).fetchone()
                if row is not None:
                    store.unindex_doc(conn, row[0])
                cur = conn.execute("DELETE FROM memories WHERE id = ?", (memory_id,))
                return cur.rowcount > 0

        found = await asyncio.to_thread(run)
        log_event("memory_op", op="forget", count=int(found))
        return found

    async def supersede(self, old_id: int, new_id: int) -> None:
        """Mark memory ``old_id`` as replaced by ``new_id``."""

        def run() -> None:
            with self.store.transaction() as conn:
                conn.execute(
                    "UPDATE memories SET superseded_by = ?, updated_at = ? WHERE id = ?",
                    (new_id, now_iso(), old_id),
                )

        await asyncio.to_thread(run)
        log_event("memory_op", op="supersede", count=1)

    async def touch_memory(self, memory_id: int, importance: int | None = None) -> None:
        """Note that a fact was restated (near-duplicate): bump updated_at, keep max importance."""

        def run() -> None:
            with self.store.transaction() as conn:
                conn.execute(
                    "UPDATE memories SET updated_at = ?, importance = max(importance, ?) "
                    "WHERE id = ?",
                    (now_iso(), importance or 1, memory_id),
                )

        await asyncio.to_thread(run)

    async def list_memories(self, *, scope: str | None = None, limit: int = 50) -> list[dict]:
        """Newest memories first (all scopes when ``scope`` is None)."""
        sql = (
            "SELECT id, text, importance, source, speaker, scope, session_id, external_id, "
            "created_at, updated_at, superseded_by FROM memories"
        )
        params: list[Any] = []
        if scope is not None:
            sql += " WHERE scope = ?"
            params.append(scope)
        sql += " ORDER BY id DESC LIMIT ?"
        params.append(limit)
        rows = await asyncio.to_thread(self.store.query, sql, params)
        cols = (
            "id text importance source speaker scope session_id external_id created_at "
            "updated_at superseded_by"
        ).split()
        return [dict(zip(cols, r, strict=True)) for r in rows]

    async def similar_memories(
        self, text: str, *, scope: str, k: int = 5
    ) -> list[tuple[dict, float]]:
        """Live (not superseded) memories most similar to ``text``: (row, cosine similarity)."""
        if not self.vector_enabled:
            return []
        try:
            vec = await self._encode([text])
        except MemoryStoreError as exc:
            self._embedding_failed(exc)
            return []

        def run() -> list[tuple[dict, float]]:
            rows = self.store.query(
                "SELECT v.rowid, v.distance FROM docs_vec v WHERE v.embedding MATCH ? "
                "AND k = ? AND v.scope = ? ORDER BY v.distance",
                (vec[0].tobytes(), k * 4, scope),
            )
            out = []
            for doc_id, distance in rows:
                mem = self.store.query(
                    "SELECT m.id, m.text, m.importance, m.created_at FROM docs d "
                    "JOIN memories m ON d.kind = 'memory' AND d.ref_id = m.id "
                    "WHERE d.id = ? AND m.superseded_by IS NULL",
                    (doc_id,),
                )
                if mem:
                    row = dict(zip(("id", "text", "importance", "created_at"), mem[0], strict=True))
                    out.append((row, 1.0 - float(distance)))
            return out[:k]

        return await asyncio.to_thread(run)

    # ---- maintenance -------------------------------------------------------------------

    async def stats(self) -> dict[str, Any]:
        counts = await asyncio.to_thread(self.store.counts)
        size = self.cfg.db_path.stat().st_size if self.cfg.db_path.exists() else 0
        return {
            **counts,
            "db_path": str(self.cfg.db_path),
            "db_bytes": size,
            "embedding_model": await asyncio.to_thread(self.store.get_meta, "embedding_model"),
            "embedding_dim": await asyncio.to_thread(self.store.get_meta, "embedding_dim"),
            "vector_enabled": self.vector_enabled,
            "vector_error": self.vector_error,
        }

    async def count_docs(self) -> int:
        return int((await asyncio.to_thread(self.store.query, "SELECT count(*) FROM docs"))[0][0])

    async def reindex(self, progress: Callable[[int], None] | None = None) -> int:
        """Re-embed everything with the configured model and record it; returns the count."""
        if not self.store.vector_enabled:
            raise MemoryStoreError(
                f"cannot reindex: sqlite-vec is unavailable ({self.store.vector_error})"
            )
        await self._load_embedder()
        await asyncio.to_thread(
            self.store.reset_vectors, self.cfg.embedding_model, self.cfg.embedding_dim
        )
        self.vector_enabled = True
        return await self.flush_index(progress)
