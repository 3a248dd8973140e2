"""An in-RAM copy of a large scope's vectors for brute-force KNN with numpy.

sqlite-vec stays the storage of record and serves KNN for ordinary stores; past
``RAM_INDEX_MIN_DOCS`` embedded docs in one scope its scan (~45 ms at 100k × 384 here) is
slower than one numpy matrix product (~3 ms), so the store keeps this mirror.

Invariants:
- Built from ``docs_vec`` on first use; kept in step by the store on every vector write and
  delete; dropped whenever a transaction rolls back (rebuilt on next use).
- Vectors are unit length, so a dot product is the cosine similarity.
- Costs 4 × dim bytes of RAM per doc (~150 MB for 100k 384-dim docs).
- One scan of the matrix per query, split over two cores (single-threaded BLAS in each, so no
  BLAS threads spin after it). The feedback pass (a query moved towards a doc) reuses the
  first pass's similarities and scores a candidate pool, with a bound that proves the result
  exact (else it scans again).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

RAM_INDEX_MIN_DOCS = 20_000
NEAR_POOL = 4096  # candidates :meth:`VectorIndex.knn_near` scores before its exactness check
SCAN_THREADS = min(2, os.cpu_count() or 1)  # a scan is memory-bound: two cores, half the time
SPLIT_MIN_ROWS = 16_384

_scan_pool: ThreadPoolExecutor | None = None
_scan_lock = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    global _scan_pool
    with _scan_lock:
        if _scan_pool is None:
            _scan_pool = ThreadPoolExecutor(SCAN_THREADS, thread_name_prefix="luna-vector-scan")
        return _scan_pool


_blas_limited = False


def _limit_blas_threads() -> None:
    """Keep this process's BLAS single-threaded (once).

    One gemv over 100k × 384 takes a few ms on one core; but OpenBLAS's extra threads spin for
    a while after every call, and on a small box that starves the low-priority embedding
    process (measured: query embedding 8 ms -> 115 ms at 20k docs).
    """
    global _blas_limited
    if not _blas_limited:
        from threadpoolctl import threadpool_limits

        threadpool_limits(limits=1, user_api="blas")
        _blas_limited = True


class VectorIndex:
    """Doc ids and their vectors for one scope, growable, with tombstones for deletes."""

    def __init__(self, dim: int) -> None:
        _limit_blas_threads()
        self.dim = dim
        self.ids = np.full(1024, -1, dtype=np.int64)
        self.mat = np.zeros((1024, dim), dtype=np.float32)
        self.pos: dict[int, int] = {}
        self.n = 0

    def __len__(self) -> int:
        return len(self.pos)

    def upsert(self, doc_id: int, vec: np.ndarray) -> None:
        p = self.pos.get(doc_id)
        if p is None:
            if self.n == len(self.ids):
                self.ids = np.concatenate([self.ids, np.full(self.n, -1, dtype=np.int64)])
                self.mat = np.concatenate([self.mat, np.zeros_like(self.mat)])
            p = self.n
            self.n += 1
            self.pos[doc_id] = p
            self.ids[p] = doc_id
        self.mat[p] = vec

    def remove(self, doc_id: int) -> None:
        p = self.pos.pop(doc_id, None)
        if p is not None:
            self.ids[p] = -1
            self.mat[p] = 0.0

    def sims(self, query: np.ndarray) -> np.ndarray:
        """Cosine similarity of every slot to ``query`` (removed slots get -2)."""
        n = self.n
        if n < SPLIT_MIN_ROWS or SCAN_THREADS < 2:
            sims = self.mat[:n] @ query
        else:  # one matrix-vector product per core (numpy releases the GIL inside BLAS)
            sims = np.empty(n, dtype=np.float32)
            cuts = np.linspace(0, n, SCAN_THREADS + 1, dtype=int)
            parts = [
                _pool().submit(np.dot, self.mat[lo:hi], query, sims[lo:hi])
                for lo, hi in zip(cuts, cuts[1:], strict=False)
            ]
            for part in parts:
                part.result()
        sims[self.ids[:n] < 0] = -2.0
        return sims

    def top(self, sims: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The ``k`` best live slots of ``sims``: (doc id, score), best first."""
        if not self.pos or k <= 0:
            return []
        k = min(k, self.n)
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top])]
        return [(int(self.ids[i]), float(sims[i])) for i in top if self.ids[i] >= 0]

    def knn(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The ``k`` most similar live docs: (doc id, cosine similarity), best first."""
        return self.top(self.sims(query), k)

    def knn_near(
        self, sims_q: np.ndarray, moved: np.ndarray, a: float, b: float, k: int
    ) -> list[tuple[int, float]]:
        """The exact ``k`` best docs for ``moved = a·q + b·c`` (``a, b ≥ 0``, ``q`` and ``c``
        unit vectors), given ``sims_q``, the similarities to ``q`` from :meth:`sims`.

        Only the ``NEAR_POOL`` docs closest to ``q`` are scored: outside them ``q·x ≤ s``
        (the pool's lowest) and ``c·x ≤ 1``, so no doc there beats ``a·s + b``. When the pool's
        ``k``-th best does, the answer is exact; otherwise every doc is scored.
        """
        live = self.n
        if live <= NEAR_POOL or k >= NEAR_POOL:
            return self.knn(moved, k)
        pool = np.argpartition(-sims_q, NEAR_POOL - 1)[:NEAR_POOL]
        scores = self.mat[pool] @ moved
        scores[self.ids[pool] < 0] = -2.0
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        if kth < a * float(sims_q[pool].min()) + b:
            return self.knn(moved, k)
        best = np.argpartition(-scores, k - 1)[:k]
        best = best[np.argsort(-scores[best])]
        return [(int(self.ids[pool[i]]), float(scores[i])) for i in best if scores[i] > -2.0]
