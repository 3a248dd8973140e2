"""Embeddings in a child process, so encoding never competes with the event loop.

Why: in a thread, sentence-transformers holds the GIL for tokenization and pooling and torch
spreads over every core, so on a small box the event loop waits tens of milliseconds behind
it. In a child process at a lower CPU priority (nice 10) it shares no GIL with the loop and the
kernel lets the loop run first.

Invariants:
- One worker process per (model, dim), shared by every Memory in this process and started on
  first use (spawn: no forked event-loop state).
- A worker that dies is reported as MemoryStoreError (Memory then runs keyword-only and says
  so); the next call starts a fresh worker.
- The worker exits by itself within a second when Luna's process is gone (even on kill -9).
- Vectors come back exactly as :class:`Embedder` makes them (float32, unit length, ``dim``).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from luna.errors import MemoryStoreError
from luna.memory.embeddings import DEFAULT_BACKEND, Embedder, PerModel

WORKER_NICE = 10
PARENT_CHECK_S = 0.5
SHUTDOWN_TIMEOUT = 10.0

_worker_embedder: Embedder | None = None


def _exit_with_parent(parent_pid: int) -> None:
    """A worker must not outlive Luna, even after ``kill -9``: it would hold the model's RAM."""
    while True:
        time.sleep(PARENT_CHECK_S)
        if os.getppid() != parent_pid:
            os._exit(0)


def _init_worker(model_name: str, dim: int, backend: str, parent_pid: int) -> None:
    global _worker_embedder
    threading.Thread(target=_exit_with_parent, args=(parent_pid,), daemon=True).start()
    try:
        os.nice(WORKER_NICE)
    except OSError:  # pragma: no cover - not allowed here: run at normal priority
        pass
    _worker_embedder = Embedder(model_name, dim, backend)


def _load() -> bool:
    if _worker_embedder is None:  # pragma: no cover - initializer always ran
        raise MemoryStoreError("embedding worker was not initialized")
    _worker_embedder.load()
    return True


def _encode(texts: list[str], is_query: bool) -> Any:
    if _worker_embedder is None:  # pragma: no cover - initializer always ran
        raise MemoryStoreError("embedding worker was not initialized")
    return _worker_embedder.encode(texts, is_query=is_query)


class EmbeddingProcess:
    """An :class:`Embedder` living in a child process; async API."""

    @classmethod
    def shared(cls, model_name: str, dim: int, backend: str = DEFAULT_BACKEND) -> EmbeddingProcess:
        """The process-wide worker for a model (one child process per model)."""
        return _WORKERS.get(model_name, dim, backend)

    def __init__(self, model_name: str, dim: int, backend: str = DEFAULT_BACKEND) -> None:
        self.model_name = model_name
        self.dim = dim
        self.backend = backend
        self._pool: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    def _executor(self) -> ProcessPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ProcessPoolExecutor(
                    max_workers=1,
                    mp_context=multiprocessing.get_context("spawn"),
                    initializer=_init_worker,
                    initargs=(self.model_name, self.dim, self.backend, os.getpid()),
                )
            return self._pool

    async def _call(self, fn: Any, *args: Any) -> Any:
        loop = asyncio.get_running_loop()
        pool = self._executor()
        try:
            return await loop.run_in_executor(pool, fn, *args)
        except BrokenProcessPool as exc:
            self._discard(pool)
            raise MemoryStoreError("the embedding worker process died") from exc

    def _discard(self, broken: ProcessPoolExecutor) -> None:
        """Drop the pool that broke, never a fresh one another call already started."""
        with self._lock:
            if self._pool is not broken:
                return
            self._pool = None
        broken.shutdown(wait=False, cancel_futures=True)

    async def load(self) -> None:
        await self._call(_load)

    async def encode(self, texts: list[str], *, is_query: bool = False) -> Any:
        return await self._call(_encode, texts, is_query)

    def shutdown(self, *, wait: bool = False, timeout: float = SHUTDOWN_TIMEOUT) -> None:
        """Stop the worker; with ``wait``, give it ``timeout`` seconds, then terminate it."""
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is None:
            return
        workers = list((pool._processes or {}).values())  # noqa: SLF001 - to bound the wait
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
