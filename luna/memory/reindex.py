"""Re-embedding every doc with the configured model (``luna memory reindex``).

Invariants: resumable after ``kill -9`` (the store records that a reindex is under way and
which model it is for); Luna running beside it answers from FTS for what has no vector yet;
no SQLite or embedding work on the event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from luna.errors import MemoryStoreError
from luna.memory import Memory
from luna.observe import log_event


async def reindex(
    memory: Memory,
    progress: Callable[[int], None] | None = None,
    started: Callable[[int, int], None] | None = None,
) -> int:
    """Re-embed everything with the configured model and record it; returns the count.

    Resumable: the first step drops every vector and records the model (and that a
    reindex is under way); a reindex to the same model that was stopped (``kill -9``)
    continues with the docs still without a vector. ``started(done, total)`` is called
    once before the first batch (``done``: the docs a stopped run embedded already).
    Luna, running beside it, answers from FTS for what has no vector yet.
    """
    if not memory.store.vector_enabled:
        raise MemoryStoreError(
            f"cannot reindex: sqlite-vec is unavailable ({memory.store.vector_error})"
        )
    await memory.encoder.load()
    model, dim = memory.cfg.vector_model, memory.cfg.embedding_dim
    if await asyncio.to_thread(memory.store.reindex_pending, model, dim):
        await memory.writes.run(memory.store, memory.store.check_embedding_model, model, dim)
        log_event("memory_op", op="reindex_resumed")
    else:
        await asyncio.to_thread(memory.store.reset_vectors, model, dim)
    memory.vector_enabled = True
    if started is not None:
        counts = await asyncio.to_thread(memory.store.counts)
        started(counts["embedded"], counts["indexed"])
    done = await memory.flush_index(progress)
    await asyncio.to_thread(memory.store.finish_reindex)
    return done
