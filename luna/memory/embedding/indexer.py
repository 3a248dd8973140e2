"""The background vector indexer: embeds every searchable text still without a vector.

Invariants:
- A doc is keyword-searchable from the moment it is written; its vector follows here. Docs left
  without one (a crash, the worker still warming, an FTS-only period) are found by the same
  query (``docs.embedded = 0``) and embedded on the next run.
- It waits for the embedding model to be ready instead of queueing behind its load, and it runs
  ``SETTLE_S`` after the last wake-up, in batches of ``BACKGROUND_BATCH``: a turn's query vector
  never waits behind more than one small batch.
- One task, tracked; stopping it cancels it. A failure of the model ends vector indexing (the
  Memory runs keyword-only and says so); any other error is logged and retried later.
- SQLite runs in worker threads, encoding in the embedding process (or a thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from luna.errors import MemoryStoreError
from luna.memory.embedding.encoder import Encoder
from luna.memory.embedding.endpoint import EndpointEncoder
from luna.memory.storage.store import Store

log = logging.getLogger(__name__)

BACKGROUND_BATCH = 16  # ~50 ms of encoding: what a query may have to wait behind
FLUSH_BATCH = 128  # one-shot commands: throughput first
SETTLE_S = 0.2  # start after this much quiet: messages of a burst go in one batch
RETRY_S = 5.0


TEXT_COLUMNS = {"message": ("messages", "content"), "memory": ("memories", "text"),
                "summary": ("summaries", "text")}  # fmt: skip


def pending_docs(store: Store, limit: int, after_id: int = 0) -> list[tuple[int, str, str]]:
    """Docs without a vector: (doc id, scope, text), oldest first (blocking)."""
    rows = store.query(
        "SELECT id, kind, ref_id, scope FROM docs WHERE embedded = 0 AND id > ? "
        "ORDER BY id LIMIT ?",
        (after_id, limit),
    )
    texts: dict[tuple[str, int], str] = {}
    for kind, (table, column) in TEXT_COLUMNS.items():
        ids = [r[2] for r in rows if r[1] == kind]
        if ids:  # at most ``limit`` (a batch) ids
            marks = ",".join("?" * len(ids))
            sql = f"SELECT id, {column} FROM {table} WHERE id IN ({marks})"
            texts.update(((kind, ref), text) for ref, text in store.query(sql, ids))
    return [(r[0], r[3], texts.get((r[1], r[2]), "")) for r in rows]


async def index_batch(store: Store, encoder: Encoder | EndpointEncoder, limit: int) -> int:
    """Embed up to ``limit`` docs that have no vector yet; returns how many."""
    pending = await asyncio.to_thread(pending_docs, store, limit)
    if not pending:
        return 0
    vecs = await encoder.encode([p[2] for p in pending])
    rows = [(p[0], p[1], v.tobytes()) for p, v in zip(pending, vecs, strict=True)]
    await asyncio.to_thread(store.store_vectors, rows)
    return len(rows)


class Indexer:
    """Runs :func:`index_batch` in the background whenever it is woken."""

    def __init__(
        self,
        store: Store,
        encoder: Encoder | EndpointEncoder,
        is_enabled: Callable[[], bool],
        on_error: Callable[[MemoryStoreError], None],
    ) -> None:
        self.store = store
        self.encoder = encoder
        self.is_enabled = is_enabled
        self.on_error = on_error
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="memory-indexer")
        self._wake.set()

    def wake(self) -> None:
        self._wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            while self._wake.is_set():  # settle: a burst of messages wakes it once
                self._wake.clear()
                await asyncio.sleep(SETTLE_S)
            if not await self.encoder.wait_ready():
                return  # the model cannot load: keyword-only from now on (the encoder said so)
            try:
                while self.is_enabled() and await index_batch(
                    self.store, self.encoder, BACKGROUND_BATCH
                ):
                    pass
            except MemoryStoreError as exc:
                self.on_error(exc)  # a dead worker is restarted; anything else ends vectors
                self._wake.set()
            except Exception:  # keep indexing later; the operator sees the log
                log.exception("memory: vector indexing failed; will retry")
                await asyncio.sleep(RETRY_S)
                self._wake.set()
