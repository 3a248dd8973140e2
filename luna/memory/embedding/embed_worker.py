"""Embeddings in a child process, so encoding never competes with the event loop.

Why: in a thread, tokenization and pooling hold the GIL and the model spreads over every
core, so on a small box the event loop waits tens of milliseconds behind it. In a child process
it shares no GIL with the loop. Bulk work (ingest, the indexer, the model's load and export)
runs on two threads at a lower CPU priority (nice 10: the kernel lets the loop run first); a
turn's query vector is computed at normal priority, so a busy box does not make the turn wait
for it, and once the model is loaded it travels over the worker's own query socket
(:mod:`luna.memory.embedding.query_channel`), not through the pool's helper threads.

Invariants:
- One worker process per (model, dim, backend), shared by every Memory in this process and
  started on first use (spawn: no forked event-loop state). :meth:`EmbeddingProcess.load` is how
  Memory warms it in the background; ``is_ready`` is True once a call has come back, and only
  then does a turn's recall ask it for a query vector (before that, recall is keyword-only and
  never waits: see ``luna.memory``).
- With the model's export in the cache, the worker imports neither torch nor
  sentence-transformers (it reports ``torch_loaded`` in its :class:`LoadInfo`).
- A worker that dies is reported as :class:`WorkerDiedError` (a MemoryStoreError), by the pool
  or by the query socket; the next call starts a fresh worker (with a socket of its own), and
  Memory restarts it in the background (keyword-only meanwhile).
- The worker exits by itself within a second when Luna's process is gone (even on kill -9).
- The worker ignores SIGINT: Ctrl-C in the terminal reaches Luna's process only.
- A shutdown that waits gives the worker ``SHUTDOWN_TIMEOUT`` (1 s), then terminates it.
- Vectors come back exactly as :class:`Embedder` makes them (float32, unit length, ``dim``).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import sys
import threading
import time
import weakref
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Any

from luna.errors import MemoryStoreError
from luna.memory.embedding.embeddings import (
    DEFAULT_BACKEND,
    ONNX_BATCH_SIZE,
    Embedder,
    LoadInfo,
    PerModel,
)
from luna.memory.embedding.query_channel import QueryChannel, WorkerDiedError, serve

__all__ = ["EmbeddingProcess", "WorkerDiedError"]

WORKER_NICE = 10
PARENT_CHECK_S = 0.5
# Why short: at exit the worker is often mid-load (the model, or waiting for its first export);
# waiting for that made `echo hi | luna` take 13 s. Nothing it does needs a clean exit (the
# cache publishes atomically; the export runs detached and finishes on its own), so it gets this
# long to go, then is terminated.
SHUTDOWN_TIMEOUT = 1.0

BULK_THREADS = 2  # ONNX Runtime runs one thread per call; bulk work splits over two

_worker_embedder: Embedder | None = None
_bulk: ThreadPoolExecutor | None = None


def exit_with_parent(parent_pid: int) -> None:
    """Exit once ``parent_pid`` is gone (run in a daemon thread): a worker must not outlive
    Luna, even after ``kill -9``, or it would hold the model's RAM."""
    while True:
        time.sleep(PARENT_CHECK_S)
        if os.getppid() != parent_pid:
            os._exit(0)


def die_with_parent(parent_pid: int) -> None:
    """Be killed by the kernel the moment the thread that started this process goes
    (``PR_SET_PDEATHSIG``, Linux), and exit now if ``parent_pid`` is already gone; elsewhere,
    :func:`exit_with_parent` in a daemon thread. For a child that must not outlive its parent
    even by :func:`exit_with_parent`'s half second (the model export, whose parent a shutdown
    terminates)."""
    if sys.platform == "linux":
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    else:  # pragma: no cover - Linux only here
        threading.Thread(target=exit_with_parent, args=(parent_pid,), daemon=True).start()
    if os.getppid() != parent_pid:
        os._exit(0)


def _lower_priority() -> None:
    """Run this thread (and what it starts: the model export) at ``WORKER_NICE``."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WORKER_NICE)
    except OSError:  # pragma: no cover - not allowed here: run at normal priority
        pass


def _submit_without_sigint(pool: ProcessPoolExecutor, fn: Any, *args: Any) -> Any:
    """The pool's first submit, which starts the worker process, with SIGINT blocked in this
    thread: the child inherits the mask, so a Ctrl-C meant for the REPL (the terminal sends it
    to the whole foreground process group) stays pending until :func:`_init_worker` ignores it,
    even while the child is still importing."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        return pool.submit(fn, *args)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _init_worker(
    model_name: str,
    dim: int,
    backend: str,
    cache_dir: Path | None,
    legacy_dir: Path | None,
    parent_pid: int,
    queries: Any = None,
) -> None:
    global _worker_embedder, _bulk
    # Ctrl-C is for Luna's process, which cancels a turn; the worker (and the export it may
    # start, which inherits this) must not die of it. Ignored first, then the pending one from
    # start-up is dropped by unblocking.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    threading.Thread(target=exit_with_parent, args=(parent_pid,), daemon=True).start()
    _bulk = ThreadPoolExecutor(
        BULK_THREADS, thread_name_prefix="embed-bulk", initializer=_lower_priority
    )
    _worker_embedder = Embedder(model_name, dim, backend, cache_dir, legacy_dir)
    if queries is not None:  # this thread's priority (normal): queries are a turn's
        threading.Thread(
            target=serve,
            args=(queries, lambda texts: _encode(texts, True)),
            name="embed-query",
            daemon=True,
        ).start()


def _embedder() -> tuple[Embedder, ThreadPoolExecutor]:
    if _worker_embedder is None or _bulk is None:  # pragma: no cover - initializer always ran
        raise MemoryStoreError("embedding worker was not initialized")
    return _worker_embedder, _bulk


def _load() -> LoadInfo:
    embedder, bulk = _embedder()
    return bulk.submit(embedder.load).result()  # the load (and an export) at low priority


def _encode(texts: list[str], is_query: bool) -> Any:
    """A query is encoded here, at normal priority (a turn waits for it); anything else on
    the low-priority threads, split across them."""
    import numpy as np

    embedder, bulk = _embedder()
    if not embedder.is_loaded:
        _load()
    if is_query:
        return embedder.encode(texts, is_query=True)
    parts = BULK_THREADS if len(texts) >= 2 * ONNX_BATCH_SIZE else 1
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
    chunks = [order[k::parts] for k in range(parts)]  # similar lengths in every chunk
    futures = [bulk.submit(embedder.encode, [texts[i] for i in chunk]) for chunk in chunks]
    out = np.empty((len(texts), embedder.dim), dtype=np.float32)
    for chunk, future in zip(chunks, futures, strict=True):
        out[chunk] = future.result()
    return out


class EmbeddingProcess:
    """An :class:`Embedder` living in a child process; async API."""

    @classmethod
    def shared(
        cls,
        model_name: str,
        dim: int,
        backend: str = DEFAULT_BACKEND,
        cache_dir: Path | None = None,
        legacy_dir: Path | None = None,
    ) -> EmbeddingProcess:
        """The process-wide worker for a model (one child process per model)."""
        return _WORKERS.get(model_name, dim, backend, cache_dir, legacy_dir)

    def __init__(
        self,
        model_name: str,
        dim: int,
        backend: str = DEFAULT_BACKEND,
        cache_dir: Path | None = None,
        legacy_dir: Path | None = None,
    ) -> None:
        self.model_name = model_name
        self.dim = dim
        self.backend = backend
        self.cache_dir = cache_dir  # see Embedder: where exports are found and published
        self.legacy_dir = legacy_dir
        self.info: LoadInfo | None = None  # set when the model has loaded in the worker
        self._pool: ProcessPoolExecutor | None = None
        self._queries: QueryChannel | None = None  # the current pool's worker's query socket
        self._started: weakref.WeakSet[ProcessPoolExecutor] = weakref.WeakSet()
        self._lock = threading.Lock()

    @property
    def is_ready(self) -> bool:
        """True when the worker runs with its model loaded: a call now costs only the encode."""
        return self.info is not None and self._pool is not None

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._queries = QueryChannel()
                self._pool = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_init_worker,
                    initargs=(
                        self.model_name,
                        self.dim,
                        self.backend,
                        self.cache_dir,
                        self.legacy_dir,
                        os.getpid(),
                        self._queries.worker_end,
                    ),
                )
            return self._pool

    async def _call(self, fn: Any, *args: Any) -> Any:
        pool = self._executor()
        try:
            if pool in self._started:
                future = pool.submit(fn, *args)
            else:  # the first submit starts the process (fork + exec): not on the event loop
                future = await asyncio.to_thread(_submit_without_sigint, pool, fn, *args)
                self._started.add(pool)
                if self._pool is pool and self._queries is not None:
                    self._queries.worker_started()  # the worker holds its end now
            return await asyncio.wrap_future(future)
        except BrokenProcessPool as exc:
            self._discard(pool)
            raise WorkerDiedError("the embedding worker process died") from exc

    def _discard(self, broken: ProcessPoolExecutor) -> None:
        """Drop the pool that broke, never a fresh one another call already started."""
        with self._lock:
            if self._pool is not broken:
                return
            self._pool = None
            self.info = None
            queries, self._queries = self._queries, None
        if queries is not None:
            queries.close()
        broken.shutdown(wait=False, cancel_futures=True)

    async def load(self) -> LoadInfo:
        """Start the worker if needed and load its model; how it loaded."""
        info: LoadInfo = await self._call(_load)
        self.info = info
        return info

    async def encode(self, texts: list[str], *, is_query: bool = False) -> Any:
        queries, pool = self._queries, self._pool
        if is_query and self.is_ready and queries is not None and queries.is_free:
            try:
                return await queries.encode(texts)
            except WorkerDiedError:
                if pool is not None:
                    self._discard(pool)
                raise
        vecs = await self._call(_encode, texts, is_query)
        if self.info is None:  # loaded by this first call: learn how (a cheap second call)
            self.info = await self._call(_load)
        return vecs

    def shutdown(self, *, wait: bool = False, timeout: float = SHUTDOWN_TIMEOUT) -> None:
        """Stop the worker; with ``wait``, give it ``timeout`` seconds, then terminate it."""
        with self._lock:
            pool, self._pool = self._pool, None
            self.info = None
            queries, self._queries = self._queries, None
        if queries is not None:
            queries.close()
        if pool is None:
            return
        workers = list((pool._processes or {}).values())  # to bound the wait
        pool.shutdown(wait=False, cancel_futures=True)
        if not wait:
            return
        deadline = time.monotonic() + timeout
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
            if worker.is_alive():
                worker.terminate()
                worker.join(1.0)

    @classmethod
    def shutdown_all(cls) -> None:
        """Stop every worker and wait for it to exit (blocking: call from a thread)."""
        for worker in _WORKERS.values():
            worker.shutdown(wait=True)


_WORKERS = PerModel(EmbeddingProcess)
