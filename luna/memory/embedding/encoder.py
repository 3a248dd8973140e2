"""The embedding model as Memory uses it: warmed in the background, asked only when ready.

Memory runs the model in the embedding process (:mod:`luna.memory.embedding.embed_worker`) or, with
``memory.embedding_process = false``, in a worker thread. Either way loading it takes from a
quarter of a second (the cached ONNX export) to several seconds (the first export, or torch).

Invariants:
- :meth:`Encoder.start_warming` starts one tracked load task and returns at once; its outcome is
  logged (``memory_op`` ``embedder_ready`` or ``embedder_failed``). Beside it, a look at whether
  the model is prepared on disk (:mod:`luna.memory.embedding.prepared`: milliseconds).
- ``is_ready`` is True only once the model has loaded: a call then costs one encode. Recall
  checks it instead of waiting (see ``luna.memory``), with one exception, :meth:`settle`: the
  first recall of a process whose model is prepared waits for its load, up to
  ``PREPARED_LOAD_WAIT_S`` (a second or so), so a one-message run is not keyword-only. A model
  not prepared yet (its export takes a minute) is never waited for. Ingest, the indexer and
  one-shot commands call :meth:`encode`, which waits for the load.
- A worker process that dies is restarted in the background, up to ``MAX_RESTARTS`` times per
  process; every other failure is final (``MemoryStoreError`` to the caller, who runs
  keyword-only and says so).
- Never blocks the event loop: the model loads and encodes in the child process or a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

from luna.config import MemoryConfig
from luna.errors import MemoryStoreError
from luna.memory.embedding.embed_worker import EmbeddingProcess, WorkerDiedError
from luna.memory.embedding.embeddings import Embedder, LoadInfo
from luna.memory.embedding.models import text_prefixes, with_prefix
from luna.memory.embedding.prepared import PreparedState, find_state, places, uses_local_model
from luna.observe import log_event

log = logging.getLogger(__name__)

MAX_RESTARTS = 3
PREPARED_LOAD_WAIT_S = 3.0  # a prepared model loads in about a second (process start included)


class Encoder:
    """One Memory's handle on the embedding model."""

    is_down = False  # only an endpoint goes down and comes back (luna.memory.embedding.endpoint)

    def __init__(self, cfg: MemoryConfig) -> None:
        where = places(cfg)
        self.cache_dir: Path = where.export_dir
        model, dim, backend = cfg.embedding_model, cfg.embedding_dim, cfg.embedding_backend
        self.embedder = Embedder.shared(model, dim, backend, self.cache_dir, where.legacy_dir)
        self.process = (
            EmbeddingProcess.shared(model, dim, backend, self.cache_dir, where.legacy_dir)
            if cfg.embedding_process
            else None
        )
        self.prefixes = text_prefixes(
            model, cfg.embedding_query_prefix, cfg.embedding_document_prefix
        )
        self.cfg = cfg
        self.error: MemoryStoreError | None = None
        self._warming: asyncio.Task[LoadInfo | None] | None = None
        self._looking: asyncio.Task[PreparedState] | None = None
        self._has_settled = False
        self._restarts = 0

    @property
    def info(self) -> LoadInfo | None:
        """How the model loaded (None until it has)."""
        return self.process.info if self.process is not None else self.embedder.info

    @property
    def is_ready(self) -> bool:
        if self.process is not None:
            return self.process.is_ready
        return self.embedder.is_loaded

    @property
    def state(self) -> str:
        """ "ready", "warming", "failed" or "cold" (not asked to load yet)."""
        if self.is_ready:
            return "ready"
        if self.error is not None:
            return "failed"
        if self._warming is not None and not self._warming.done():
            return "warming"
        return "cold"

    async def load(self) -> LoadInfo:
        """Load the model now (waiting for it); MemoryStoreError when it cannot load."""
        if self.process is not None:
            return await self.process.load()
        return await asyncio.to_thread(self.embedder.load)

    def start_warming(self) -> None:
        """Load the model in the background (once; again after a worker died)."""
        if self.is_ready or (self._warming is not None and not self._warming.done()):
            return
        self._warming = asyncio.create_task(self._warm(), name="memory-embedder-warm")
        if self._looking is None and uses_local_model(self.cfg):
            self._looking = asyncio.create_task(asyncio.to_thread(find_state, self.cfg))

    async def prepared_state(self) -> PreparedState | None:
        """Whether the model was prepared on disk when warming started (None: not looked,
        or nothing to prepare: the torch backend)."""
        if self._looking is None:
            return None
        try:
            return await asyncio.shield(self._looking)
        except (OSError, MemoryStoreError):  # the load says why, once
            return None

    async def settle(self) -> None:
        """Before a recall: the first time, when the model is prepared and still loading, wait
        for the load (at most ``PREPARED_LOAD_WAIT_S``); otherwise return at once."""
        if self._has_settled or self.is_ready or self._warming is None:
            return
        self._has_settled = True
        state = await self.prepared_state()
        if state is None or not state.is_ready or self._warming.done():
            return
        with contextlib.suppress(TimeoutError, MemoryStoreError):
            await asyncio.wait_for(asyncio.shield(self._warming), PREPARED_LOAD_WAIT_S)

    async def _warm(self) -> LoadInfo | None:
        while True:
            try:
                info = await self.load()
                break
            except MemoryStoreError as exc:
                if not self._may_restart(exc):
                    self._fail(exc)
                    return None
        log_event(
            "memory_op",
            op="embedder_ready",
            backend=info.backend,
            source=info.source,
            detail=info.detail,
            torch_loaded=info.torch_loaded,
            duration_ms=round(info.seconds * 1000, 1),
        )
        return info

    async def wait_ready(self) -> bool:
        """Warm the model if nobody has yet and wait for it; True when it is ready."""
        if self.error is None:
            self.start_warming()
        if self._warming is not None:
            with contextlib.suppress(MemoryStoreError):
                await asyncio.shield(self._warming)
        return self.is_ready

    async def encode(self, texts: list[str], *, is_query: bool = False) -> Any:
        """Vectors for ``texts`` (waits for the model to load), prefixed as the model wants."""
        texts = with_prefix(texts, self.prefixes[0] if is_query else self.prefixes[1])
        try:
            if self.process is not None:
                return await self.process.encode(texts, is_query=is_query)
            return await asyncio.to_thread(self.embedder.encode, texts, is_query=is_query)
        except MemoryStoreError as exc:
            self.failed(exc)
            raise

    def failed(self, exc: MemoryStoreError) -> bool:
        """Note a failure; True when it is temporary (a worker restart is under way)."""
        if self._may_restart(exc):
            self.start_warming()
            return True
        self._fail(exc)
        return False

    def _may_restart(self, exc: MemoryStoreError) -> bool:
        if not isinstance(exc, WorkerDiedError) or self._restarts >= MAX_RESTARTS:
            return False
        self._restarts += 1
        log.warning("memory: %s; restarting it, recall is keyword-only meanwhile", exc)
        log_event("memory_op", op="embedder_restart", error=str(exc), count=self._restarts)
        return True

    def _fail(self, exc: MemoryStoreError) -> None:
        if self.error is None:
            self.error = exc
            log.error("memory: embedding model failed (%s) — recall is FTS-only from now on", exc)
            log_event("memory_op", op="embedder_failed", error=str(exc))

    @property
    def is_failed(self) -> bool:
        return self.error is not None

    async def close(self) -> None:
        if self._looking is not None:
            with contextlib.suppress(OSError, MemoryStoreError):
                await self._looking  # a few stats: not worth cancelling a thread for
        if self._warming is not None and not self._warming.done():
            self._warming.cancel()
            with contextlib.suppress(asyncio.CancelledError, MemoryStoreError):
                await self._warming
        self._warming = None
