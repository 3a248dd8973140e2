"""A navigable graph (HNSW, from faiss) over a large scope's RAM vectors: its candidates.

Why: past ``GRAPH_MIN_DOCS`` docs even the sketch scan of :mod:`.vector_index` reads every
doc's sketch per query (a few ms at 100k, linear in the scope); a graph search reads a few
hundred vectors whatever the size (0.4 ms at 100k here, recall@10 0.99 against the exact scan,
``bench/memory_scale.py``).

Invariants:
- Derived, never the truth: built in RAM from the vector index (itself loaded from
  ``docs_vec``), so a crash or a lost graph costs a rebuild, never data. Nothing is written to
  disk.
- Labels are the vector index's slots. A slot written again is added again (HNSW cannot move a
  node); the old node stays as a stale entry until the next rebuild. The caller rescores every
  candidate exactly from its own matrix and drops tombstones, so a stale node can only cost a
  candidate place, never a wrong score.
- Single-threaded: building and searching use one OpenMP thread, so a build in the background
  leaves the other core to the turns; faiss releases the GIL while it works.
- Thread safety is the caller's: :class:`~.vector_index.VectorIndex` holds its lock around
  :meth:`add` and :meth:`search` of the graph that serves, and fills a new one alone.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

GRAPH_MIN_DOCS = 50_000  # below this the sketch scan costs about as much as a graph search
GRAPH_M = 32  # links per node: recall@10 0.99 at EF_SEARCH 256 (16 links: 0.985)
GRAPH_EF_CONSTRUCTION = 80
# A search visits at least this many nodes, and more as the graph grows: recall@10 against the
# exact scan falls with size at a fixed breadth (LoCoMo-like vectors, 32 links, measured here:
# 200k at 256: 0.984; 1M at 256 / 512 / 1024 / 2048: 0.893 / 0.957 / 0.973 / 0.992, 0.5 /
# 0.8 / 1.5 / 3.3 ms). Two per thousand nodes keeps it at 0.98 or more up to 1M.
GRAPH_EF_SEARCH = 256
GRAPH_EF_PER_NODE = 0.002
GRAPH_EF_MAX = 4096
GRAPH_STALE_SHARE = 0.25  # rebuild once this share of the nodes is stale

_faiss: Any = None
_faiss_missing = False


def _load_faiss() -> Any | None:
    """faiss, once, with one OpenMP thread (None, and one log line, when it is missing)."""
    global _faiss, _faiss_missing
    if _faiss is None and not _faiss_missing:
        try:
            import faiss
        except ImportError:
            _faiss_missing = True
            log.warning("faiss is not installed: large scopes are searched by the sketch scan")
            return None
        faiss.omp_set_num_threads(1)
        _faiss = faiss
    return _faiss


def available() -> bool:
    return _load_faiss() is not None


class Graph:
    """An HNSW graph whose labels are vector-index slots."""

    def __init__(self, index: Any, labels: np.ndarray) -> None:
        self._index = index
        self._labels = labels  # faiss's sequential ids -> slots
        self.stale = 0

    def __len__(self) -> int:
        return int(self._index.ntotal)

    def add(self, slots: np.ndarray, vectors: np.ndarray, *, replacing: int = 0) -> None:
        """Add nodes for ``slots`` (``replacing`` of them were already in: now stale)."""
        if len(slots) == 0:
            return
        self._index.add(np.ascontiguousarray(vectors, dtype=np.float32))
        self._labels = np.concatenate([self._labels, slots.astype(np.int64)])
        self.stale += replacing

    def removed(self, count: int = 1) -> None:
        self.stale += count

    def needs_rebuild(self) -> bool:
        return self.stale > GRAPH_STALE_SHARE * max(1, len(self))

    @property
    def breadth(self) -> int:
        """How many nodes a search visits (faiss's efSearch) at this graph's size."""
        return int(min(GRAPH_EF_MAX, max(GRAPH_EF_SEARCH, GRAPH_EF_PER_NODE * len(self))))

    def search(self, query: np.ndarray, k: int) -> np.ndarray:
        """Up to ``k`` candidate slots for ``query``, distinct, sorted."""
        if len(self) == 0:
            return np.zeros(0, dtype=np.int64)
        self._index.hnsw.efSearch = max(k, self.breadth)
        _, found = self._index.search(query.reshape(1, -1).astype(np.float32), k)
        hits = found[0][found[0] >= 0]
        return np.unique(self._labels[hits])

    @property
    def nbytes(self) -> int:
        """What the graph holds in RAM: its 8-bit codes and its links."""
        links = self._index.hnsw.neighbors.size() * 4
        return int(len(self) * self._index.d + links + self._labels.nbytes)


def empty(sample: np.ndarray) -> Graph | None:
    """An empty graph whose 8-bit codes are fitted on ``sample`` (rows like the vectors it
    will hold); None without faiss.

    8-bit codes, not float32: a third of the RAM (66 against 181 MB at 100k × 384) and, since
    the caller rescores the candidates exactly, the same recall@10 (0.989 both, measured).
    """
    faiss = _load_faiss()
    if faiss is None:
        return None
    index = faiss.IndexHNSWSQ(
        sample.shape[1], faiss.ScalarQuantizer.QT_8bit, GRAPH_M, faiss.METRIC_INNER_PRODUCT
    )
    index.hnsw.efConstruction = GRAPH_EF_CONSTRUCTION
    index.train(np.ascontiguousarray(sample, dtype=np.float32))
    return Graph(index, np.zeros(0, dtype=np.int64))
