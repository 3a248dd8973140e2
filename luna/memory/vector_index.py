"""An in-RAM copy of a large scope's vectors for brute-force KNN with numpy.

sqlite-vec stays the storage of record and serves KNN for ordinary stores; past
``RAM_INDEX_MIN_DOCS`` embedded docs in one scope its scan (~45 ms at 100k × 384 here) is
slower than one numpy matrix product (~3 ms), so the store keeps this mirror.

Invariants:
- Built from ``docs_vec`` on first use; kept in step by the store on every vector write and
  delete; dropped whenever a transaction rolls back (rebuilt on next use).
- Vectors are unit length, so a dot product is the cosine similarity.
- Costs 4 × dim bytes of RAM per doc (~150 MB for 100k 384-dim docs).
"""

from __future__ import annotations

import numpy as np

RAM_INDEX_MIN_DOCS = 20_000

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

    def knn(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The ``k`` most similar live docs: (doc id, cosine similarity), best first."""
        if not self.pos:
            return []
        sims = self.mat[: self.n] @ query
        sims[self.ids[: self.n] < 0] = -2.0
        k = min(k, self.n)
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top])]
        return [(int(self.ids[i]), float(sims[i])) for i in top if self.ids[i] >= 0]
