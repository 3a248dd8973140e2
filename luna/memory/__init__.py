"""Luna's memory: the session log, hybrid recall over everything said, and stored facts.

``Memory`` is the facade the rest of Luna uses (contract in docs/ARCHITECTURE.md).

Invariants:
- One SQLite file holds the session log, the search index, memories and summaries.
- No SQLite or embedding work runs on the event loop: every blocking call goes through
  ``asyncio.to_thread`` or the embedding process.
- ``append_message`` returns once the message is committed (which commits survive ``kill -9``
  and which also survive power loss: :mod:`luna.memory.storage.session_log`); its vector follows
  from a tracked background indexer (FTS finds the message at once). Docs left without
  a vector (crash, FTS-only period) are embedded on the next open.
- ``open()`` (with ``background``, as the running app does) starts loading the embedding model
  in the background and returns. No turn waits for its export: until it is ready, :meth:`recall`
  runs keyword-only (mode ``fts_warming``; a prepared model's load is waited for at the first
  recall, briefly: ``Encoder.settle``) and the turn's messages are embedded when it is. Each
  recall logs the mode that served it (``hybrid``, ``fts_warming``, ``fts``), and ``luna
  doctor`` reports the recent ones. One-shot commands (``background=False``) wait for
  the model instead.
- FTS-only operation (sqlite-vec missing or the embedding model failing) is logged as a
  warning at start-up, in ``vector_enabled``/``vector_error`` and by ``luna doctor``; it is
  never silent.
- Every write waits for another program's write lock with bounded backoff, and a message that
  still cannot be written is held, never lost (:mod:`luna.memory.storage.writes`).
- ``open`` refuses a missing or empty database where the data folder shows one existed, unless
  ``fresh``, and with ``check`` a file that fails ``PRAGMA quick_check``
  (:mod:`luna.memory.storage.health`): never a silent fresh start, never a write to a damaged file.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Callable, Iterable
from typing import Any

from luna import datafolder
from luna.config import MemoryConfig
from luna.errors import DatabaseBusyError, DatabaseCorruptError, MemoryStoreError
from luna.memory.embedding.embed_worker import EmbeddingProcess
from luna.memory.embedding.embeddings import Embedder, LoadInfo
from luna.memory.embedding.encoder import Encoder
from luna.memory.embedding.endpoint import EndpointEncoder
from luna.memory.embedding.indexer import FLUSH_BATCH, Indexer, index_batch
from luna.memory.recall.pipeline import run_recall
from luna.memory.recall.search import RecallItem, format_recall
from luna.memory.storage import facts, heads, health, image_notes, session_log
from luna.memory.storage.held import HeldMessages
from luna.memory.storage.store import Store, VectorModelChangedError
from luna.memory.storage.writes import WriteGate
from luna.messages import Attachment, LoggedMessage, Usage
from luna.observe import Timer, log_event

__all__ = ["Memory", "RecallItem", "format_recall"]

log = logging.getLogger(__name__)

SOURCES = ("user", "assistant", "tool", "import")
RECALL_MODES = ("hybrid", "fts_warming", "fts")


class Memory:
    """Session log + recall + memories over one SQLite database."""

    def __init__(self, cfg: MemoryConfig) -> None:
        self.cfg = cfg
        self.encoder: Encoder | EndpointEncoder = (
            EndpointEncoder(cfg) if cfg.embedding_endpoint else Encoder(cfg)
        )
        self.vector_enabled = False
        self.vector_error = ""
        self._store: Store | None = None
        self._indexer: Indexer | None = None
        self._background = False
        self._syncing: asyncio.Task[None] | None = None
        self._sync_again = False
        self.writes = WriteGate(cfg.lock_wait, HeldMessages(datafolder.held_file(cfg.db_path)))

    @property
    def embedder(self) -> Embedder | None:
        """The in-process embedder (used when ``memory.embedding_process`` is false); None
        with ``memory.embedding_endpoint``."""
        return self.encoder.embedder

    @embedder.setter
    def embedder(self, value: Embedder) -> None:
        self.encoder.embedder = value

    @property
    def embed_process(self) -> EmbeddingProcess | None:
        return self.encoder.process

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
        check: bool = False,
        fresh: bool = False,
    ) -> None:
        """Connect, migrate, check the embedding model record, start the background work.

        ``allow_model_change`` skips the model check (used by ``reindex``); ``background=False``
        starts no indexer and no warm-up, and recall waits for the model (one-shot CLI commands
        call :meth:`flush_index` themselves); ``use_vectors=False`` runs FTS-only as if
        sqlite-vec were missing. ``check`` runs ``PRAGMA quick_check`` first (the running app
        does); ``fresh`` starts an empty database where one existed (``--fresh-database``).
        """
        await asyncio.to_thread(health.check_present, self.cfg.db_path, fresh=fresh)
        if check:
            await asyncio.to_thread(health.check_sound, self.cfg.db_path)
        store = await asyncio.to_thread(Store, self.cfg.db_path, load_vec=use_vectors)
        try:
            await self.writes.run(store, store.migrate)
            if not allow_model_change:
                await self.writes.run(
                    store,
                    store.check_embedding_model,
                    self.cfg.vector_model,
                    self.cfg.embedding_dim,
                )
        except BaseException:
            await asyncio.to_thread(store.close)
            raise
        self._store = store
        if background and self.writes.held.pending:  # left by a run that could not write them
            self.writes.retry_held(store)  # (the running Luna's job, not a one-shot command's)
        self.vector_enabled = store.vector_enabled
        self.vector_error = store.vector_error
        if not self.vector_enabled:
            log.warning(
                "memory: sqlite-vec unavailable (%s) — recall is FTS-only (keyword search)",
                self.vector_error,
            )
        log_event("memory_op", op="open", vector_enabled=self.vector_enabled)
        if background and self.vector_enabled and not allow_model_change:
            self._background = True
            self.encoder.start_warming()  # returns at once: no turn waits for the model
            self._indexer = Indexer(
                store, self.encoder, lambda: self.vector_enabled, self._embedding_failed
            )
            self._indexer.start()

    async def close(self) -> None:
        await self.writes.close(self._store)
        if self._indexer is not None:
            await self._indexer.stop()
            self._indexer = None
        await self.encoder.close()
        if self._syncing is not None:
            await self._syncing
            self._syncing = None
        if self._store is not None:
            store, self._store = self._store, None
            await asyncio.to_thread(store.sync)
            await asyncio.to_thread(store.close)

    async def warmup(self) -> LoadInfo | None:
        """Load the embedding model now and wait for it (None when vectors are off)."""
        if not self.vector_enabled:
            return None
        try:
            return await self.encoder.load()
        except MemoryStoreError as exc:
            self._embedding_failed(exc)
            return None

    @property
    def recall_mode(self) -> str:
        """What the next recall would be: ``hybrid``, ``fts_warming`` or ``fts``."""
        if not self.vector_enabled or self.encoder.is_down or self.encoder.is_failed:
            return "fts"  # no vectors, the model failed, or the endpoint is down (all logged)
        if self._background and not self.encoder.is_ready:
            return "fts_warming"
        return "hybrid"

    async def _encode(self, texts: list[str], *, is_query: bool = False) -> Any:
        """Vectors for ``texts`` (waits for the model); MemoryStoreError when it failed."""
        return await self.encoder.encode(texts, is_query=is_query)

    def _embedding_failed(self, exc: MemoryStoreError) -> None:
        if isinstance(exc, VectorModelChangedError):
            self._vectors_changed(exc)
            return
        if isinstance(exc, DatabaseBusyError | DatabaseCorruptError):
            log.info("memory: vectors wait for the database: %s", exc)
            return  # not the model's fault: the indexer tries again later
        if self.encoder.failed(exc):
            return  # a dead worker: restarting in the background, keyword-only meanwhile
        self.vector_enabled = False
        self.vector_error = str(exc)

    def _vectors_changed(self, exc: MemoryStoreError | None = None) -> None:
        """Another process re-embeds with another model: keyword-only until a restart."""
        exc = exc or VectorModelChangedError(
            f"the memory database's vectors are now another model's than "
            f"{self.cfg.vector_model!r}'s (a `luna memory reindex` ran)"
        )
        if self.vector_enabled:
            self.vector_enabled = False
            self.vector_error = str(exc)
            log.warning("memory: %s — recall is keyword-only (fts) until Luna restarts", exc)
            log_event("memory_op", op="vectors_changed", error=str(exc))

    def _wake_indexer(self) -> None:
        if self._indexer is not None:
            self._indexer.wake()

    async def flush_index(
        self, progress: Callable[[int], None] | None = None, *, limit: int | None = None
    ) -> int:
        """Embed every doc still without a vector (or about ``limit`` of them), now; returns
        how many were embedded."""
        total = 0
        # An endpoint's batch is committed as soon as it is back: a reindex stopped by kill -9
        # loses at most one request's work (in-process, FLUSH_BATCH docs is the throughput).
        batch = self.cfg.embedding_batch_size if self.cfg.embedding_endpoint else FLUSH_BATCH
        while self.vector_enabled and (limit is None or total < limit):
            try:
                n = await index_batch(self.store, self.encoder, batch)
            except MemoryStoreError as exc:
                self._embedding_failed(exc)
                raise
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
        """Append one message and return its id; committed (it survives ``kill -9``) when this
        returns. How each kind of message is made to survive power loss, and when, is
        :mod:`luna.memory.storage.session_log`'s rule: a user's message before this returns, a
        turn's final reply by a sync started here in the background."""
        message_id = await self.writes.append(
            self.store, session_id, message, context=context, usage=usage, scope=scope
        )
        if session_log.ends_turn(message):
            self._sync_soon()
        self._wake_indexer()
        return message_id

    async def _write(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """A write that waits for another program's lock (:class:`WriteGate`)."""
        return await self.writes.run(self.store, fn, *args, **kwargs)

    def _sync_soon(self) -> None:
        """fsync the log in the background (one task; a request while it runs runs it again)."""
        self._sync_again = True
        if self._syncing is None or self._syncing.done():
            self._syncing = asyncio.create_task(self._sync(), name="memory-sync")

    async def _sync(self) -> None:
        while self._sync_again:
            self._sync_again = False
            await asyncio.to_thread(self.store.sync)

    async def set_context(self, message_id: int, context: str) -> None:
        """Attach the per-turn context to an already logged user message (once)."""
        await self._write(session_log.set_context, self.store, message_id, context)

    async def prompt_history(self, session_id: str) -> tuple[str | None, list[LoggedMessage]]:
        """(cumulative summary or None, the messages after the compaction cut, as stored)."""
        return await asyncio.to_thread(session_log.prompt_history, self.store, session_id)

    async def image_descriptions(self, hashes: Iterable[str]) -> dict[str, str]:
        """sha256 -> what the image shows, for the images already described."""
        return await asyncio.to_thread(image_notes.described, self.store, list(hashes))

    async def undescribed_images(self, limit: int) -> list[Attachment]:
        """Images messages carry that have no description yet, newest first (at most limit)."""
        return await asyncio.to_thread(image_notes.undescribed, self.store, limit)

    async def describe_image(self, sha256: str, text: str, model: str) -> None:
        """Store what an image shows; the messages carrying it become findable by it."""
        if await self._write(image_notes.set_description, self.store, sha256, text, model):
            self._wake_indexer()

    async def summary(self, session_id: str) -> tuple[str | None, int]:
        """(cumulative summary or None, id of the last message it covers or 0)."""
        return await asyncio.to_thread(session_log.summary, self.store, session_id)

    async def set_summary(self, session_id: str, text: str, cut_message_id: int) -> None:
        """Replace the session's cumulative summary and move its (soft) compaction cut."""
        await self._write(session_log.set_summary, self.store, session_id, text, cut_message_id)
        self._wake_indexer()

    async def session_head(self, session_id: str) -> tuple[int, dict[str, Any] | None]:
        """(the session's compaction cut or 0, the head kept for that cut or None)."""
        return await asyncio.to_thread(heads.current, self.store, session_id)

    async def save_session_head(
        self, session_id: str, cut: int, head: dict[str, Any]
    ) -> dict[str, Any]:
        """Keep ``head`` for the session's cut unless one is kept; returns the one kept."""
        return await self._write(heads.save, self.store, session_id, cut, head)

    async def session_heads(self, session_id: str) -> list[tuple[int, str, dict[str, Any]]]:
        """Every head the session has had: (cut, created_at, head), oldest first."""
        return await asyncio.to_thread(heads.history, self.store, session_id)

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
        now: dt.datetime | None = None,
    ) -> list[RecallItem]:
        """Hybrid search over messages, memories and summaries visible to ``scope``.

        With ``session_id``, that session's messages still in the prompt view are left out.
        ``now`` (default: the UTC clock) is when the question is asked: "yesterday" or "in May"
        in ``query`` mean the days before its date.
        Never waits for the embedding model while it warms (see :attr:`recall_mode`), but for a
        prepared model's load at a process's first recall (``Encoder.settle``).
        """
        await self.encoder.settle()
        return await run_recall(
            self.store,
            query,
            scope=scope,
            k=k or self.cfg.recall_k,
            session_id=session_id,
            mode=self.recall_mode,
            embed=self.embed_query,
            mode_now=lambda: self.recall_mode,
            on_model_changed=self._vectors_changed if self.vector_enabled else None,
            today=(now or dt.datetime.now(dt.UTC)).date(),
        )

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
            ids, skipped = await self._write(facts.insert_memories, self.store, records, vecs)
        log_event("memory_op", op="add", duration_ms=round(t.ms, 2), count=len(ids))
        return ids, skipped

    async def forget(self, memory_id: int) -> bool:
        """Delete a memory (and its index rows); False when there is no such memory."""
        found = await self._write(facts.forget, self.store, memory_id)
        log_event("memory_op", op="forget", count=int(found))
        return found

    async def supersede(self, old_id: int, new_id: int) -> None:
        """Mark memory ``old_id`` as replaced by ``new_id``."""
        await self._write(facts.supersede, self.store, old_id, new_id)
        log_event("memory_op", op="supersede", count=1)

    async def touch_memory(self, memory_id: int, importance: int | None = None) -> None:
        """Note that a fact was restated (near-duplicate): bump updated_at, keep max importance."""
        await self._write(facts.touch, self.store, memory_id, importance or 1)

    async def list_memories(self, *, scope: str | None = None, limit: int = 50) -> list[dict]:
        """Newest memories first (all scopes when ``scope`` is None)."""
        return await asyncio.to_thread(facts.newest, self.store, scope, limit)

    async def similar_memories(
        self, text: str, *, scope: str, k: int = 5
    ) -> list[tuple[dict, float]]:
        """Live (not superseded) memories most similar to ``text``: (row, cosine similarity)."""
        vec = await self._encode_or_none([text])
        if vec is None:
            return []
        return await asyncio.to_thread(facts.similar, self.store, vec[0].tobytes(), scope, k)

    # ---- maintenance -------------------------------------------------------------------

    async def stats(self) -> dict[str, Any]:
        return {
            **await asyncio.to_thread(self.store.stats),
            "vector_enabled": self.vector_enabled,
            "vector_error": self.vector_error,
        }
