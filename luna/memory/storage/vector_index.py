"""An in-RAM copy of a scope's vectors, searched with numpy (a large one through a PCA sketch).

sqlite-vec stays the storage of record and serves KNN for ordinary stores; past
``RAM_INDEX_MIN_DOCS`` embedded docs in one scope its scan (~45 ms at 100k × 384 here) is
slower than numpy, so the store keeps this mirror. A small scope (at most
``SMALL_SCOPE_MAX_DOCS`` docs) is mirrored too, as long as every small mirror together stays
within ``SMALL_MIRRORS_MAX_BYTES`` (checked when a mirror is built; past the budget a small
scope is searched with sqlite-vec, as before): sqlite-vec reads a whole chunk of 1024 vector
slots for any KNN, so even a scope of 60 docs cost 0.3-0.5 ms per search, twice per recall
(the feedback pass), where a scan of its vectors in RAM takes microseconds. Same neighbours,
same cosines (to float rounding).

Invariants:
- Built from ``docs_vec`` on first use; kept in step by the store on every vector write and
  delete; dropped whenever a transaction rolls back (rebuilt on next use).
- It has its own lock, not the store's: while one recall scans, other sessions' database work
  goes on. Every method takes it; nothing outside reads the arrays.
- Vectors are unit length, so a dot product is the cosine similarity.
- A query scans a sketch, not the full vectors: every vector projected on the ``SKETCH_DIM``
  principal directions of the scope's own vectors (a quarter of the bytes), and the best
  ``max(SKETCH_CANDIDATES, SKETCH_OVERFETCH·k)`` of that scan are scored exactly. The scores
  returned are exact cosines; which docs come back is approximate (a doc the sketch ranks
  below every candidate is missed). ``bench/memory_scale.py`` measures it against the exact
  scan at 100k docs: vector recall@100 0.999, and the same LoCoMo evidence recall. A scope
  too small or too narrow for the sketch to pay is scanned in full.
- The directions are fitted on a sample when the index is built and again whenever the scope
  has doubled since (one fit of 100k × 384 takes about a quarter of a second; the write that
  triggers it waits).
- Costs 4 × (dim + ``SKETCH_DIM``) bytes of RAM per doc (~190 MB for 100k 384-dim docs).
- A scan is split over two cores (single-threaded BLAS in each, so no BLAS threads spin after
  it).
- Past ``GRAPH_MIN_DOCS`` live docs a graph (:mod:`.graph_index`) is built in a background
  thread at low priority and then picks the candidates instead of the sketch; until it is
  ready, and while a stale one is rebuilt, the sketch (or the old graph) serves. Slots written
  during a build are added to the new graph before it is swapped in.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np

from luna.memory.storage import graph_index

log = logging.getLogger(__name__)

RAM_INDEX_MIN_DOCS = 20_000
SMALL_SCOPE_MAX_DOCS = 4096  # a scope this small is mirrored too (within the budget below)
SMALL_MIRRORS_MAX_BYTES = 16 * 1024 * 1024  # of vectors in every small mirror together
SKETCH_DIM = 96  # principal directions kept: a quarter of MiniLM's 384
SKETCH_CANDIDATES = 1000  # the fewest docs scored exactly after the sketch's scan
SKETCH_OVERFETCH = 10  # ... or this many per doc asked for
SKETCH_FIT_SAMPLE = 20_000  # vectors the directions are fitted on
SCAN_THREADS = min(2, os.cpu_count() or 1)  # a scan is memory-bound: two cores, half the time
SPLIT_MIN_ROWS = 16_384
GRAPH_BUILD_CHUNK = 8192  # rows a graph build copies at a time, under the lock

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


def _scan(rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``rows @ query``, one matrix-vector product per core for a large ``rows``."""
    n = len(rows)
    if n < SPLIT_MIN_ROWS or SCAN_THREADS < 2:
        return rows @ query
    out = np.empty(n, dtype=np.float32)
    cuts = np.linspace(0, n, SCAN_THREADS + 1, dtype=int)
    parts = [  # numpy releases the GIL inside BLAS
        _pool().submit(np.dot, rows[lo:hi], query, out[lo:hi])
        for lo, hi in zip(cuts, cuts[1:], strict=False)
    ]
    for part in parts:
        part.result()
    return out


@dataclass(frozen=True)
class Candidates:
    """The slots a sketch scan or graph search picked in one index (only meaningful there)."""

    index: VectorIndex
    slots: np.ndarray


class VectorIndex:
    """Doc ids and their vectors for one scope, growable, with tombstones for deletes."""

    def __init__(self, dim: int, capacity: int = 1024) -> None:
        _limit_blas_threads()
        self.dim = dim
        capacity = max(1, capacity)  # rows held before the arrays double
        self.ids = np.full(capacity, -1, dtype=np.int64)
        self.mat = np.zeros((capacity, dim), dtype=np.float32)
        self.pos: dict[int, int] = {}
        self.n = 0
        self.basis: np.ndarray | None = None  # dim × SKETCH_DIM, once fitted
        self.sketch = np.zeros((0, SKETCH_DIM), dtype=np.float32)  # mat @ basis
        self.fitted_on = 0  # live docs when the basis was fitted
        self.lock = threading.RLock()  # re-entered: a write that doubles the scope refits
        self.graph: graph_index.Graph | None = None
        self.use_graph = True  # benchmarks turn it off to compare
        self._building: threading.Thread | None = None
        self._written_while_building: list[int] = []

    def __len__(self) -> int:
        return len(self.pos)

    def upsert(self, doc_id: int, vec: np.ndarray) -> None:
        with self.lock:
            p = self.pos.get(doc_id)
            replacing = int(p is not None)  # the graph's old node for this slot goes stale
            if p is None:
                if self.n == len(self.ids):
                    self.ids = np.concatenate([self.ids, np.full(self.n, -1, dtype=np.int64)])
                    self.mat = np.concatenate([self.mat, np.zeros_like(self.mat)])
                    if self.basis is not None:
                        self.sketch = np.concatenate([self.sketch, np.zeros_like(self.sketch)])
                p = self.n
                self.n += 1
                self.pos[doc_id] = p
                self.ids[p] = doc_id
            self.mat[p] = vec
            if self.graph is not None:
                self.graph.add(np.array([p]), self.mat[p : p + 1], replacing=replacing)
            if self._building is not None:
                self._written_while_building.append(p)
            if self.basis is not None:
                self.sketch[p] = vec @ self.basis
                if len(self.pos) >= 2 * self.fitted_on:
                    self.fit()

    def remove(self, doc_id: int) -> None:
        with self.lock:
            p = self.pos.pop(doc_id, None)
            if p is not None:
                self.ids[p] = -1
                self.mat[p] = 0.0
                if self.graph is not None:
                    self.graph.removed()
                if self.basis is not None:
                    self.sketch[p] = 0.0

    def vectors(self, doc_ids: list[int]) -> dict[int, np.ndarray]:
        """The stored vectors (copies) of the docs of ``doc_ids`` this index holds."""
        with self.lock:
            return {i: self.mat[self.pos[i]].copy() for i in doc_ids if i in self.pos}

    def scores(self, query: np.ndarray, doc_ids: list[int]) -> dict[int, float]:
        """The cosine to ``query`` of the docs of ``doc_ids`` this index holds (one product)."""
        with self.lock:
            known = [i for i in doc_ids if i in self.pos]
            rows = np.fromiter((self.pos[i] for i in known), dtype=np.int64, count=len(known))
            sims = self.mat[rows] @ query
        return dict(zip(known, map(float, sims), strict=True))

    def fit(self) -> None:
        """Fit the sketch's directions on (a sample of) the live vectors, and project them.

        The directions are the top eigenvectors of the vectors' uncentred second moment: the
        subspace that keeps the most of every dot product with a vector like them.
        """
        with self.lock:
            live = np.flatnonzero(self.ids[: self.n] >= 0)
            if self.dim < 2 * SKETCH_DIM or len(live) < RAM_INDEX_MIN_DOCS:
                return  # too small or narrow to pay: every query scans the full vectors
            rng = np.random.default_rng(0)
            sample = self.mat[rng.choice(live, min(len(live), SKETCH_FIT_SAMPLE), replace=False)]
            _, vectors = np.linalg.eigh(sample.T.astype(np.float64) @ sample)
            self.basis = np.ascontiguousarray(vectors[:, ::-1][:, :SKETCH_DIM], dtype=np.float32)
            self.sketch = self.mat @ self.basis
            self.fitted_on = len(live)

    def clear_sketch(self) -> None:
        """Scan every full vector from now on (until :meth:`fit`): benchmarks compare both."""
        with self.lock:
            self.basis = None
            self.sketch = np.zeros((0, SKETCH_DIM), dtype=np.float32)
            self.fitted_on = 0

    def exact(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The ``k`` most similar live docs by a scan of every full vector."""
        with self.lock:
            return self._best(np.arange(self.n), _scan(self.mat[: self.n], query), k)

    def knn(self, query: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The ``k`` most similar live docs: (doc id, exact cosine similarity), best first."""
        return self.search(query, k)[0]

    def search(
        self, query: np.ndarray, k: int
    ) -> tuple[list[tuple[int, float]], Candidates | None]:
        """:meth:`knn`, and the candidates the sketch picked (None when it was not used)."""
        with self.lock:
            if not self.pos or k <= 0:
                return [], None
            self._start_graph_build()
            if self.graph is not None and self.use_graph and 4 * k < len(self.pos):
                # Exact scores from the matrix; tombstones and stale nodes fall out in _best.
                # The feedback pass rescores these candidates instead of searching again (a
                # graph search at 1M docs takes 3 ms).
                slots = self.graph.search(query, 2 * k)
                return self._best(slots, self.mat[slots] @ query, k), Candidates(self, slots)
            wanted = max(SKETCH_CANDIDATES, SKETCH_OVERFETCH * k)
            if self.basis is None or 2 * wanted >= self.n:
                return self.exact(query, k), None
            rough = _scan(self.sketch[: self.n], query @ self.basis)
            if len(self.pos) < self.n:  # tombstones are never candidates
                rough[self.ids[: self.n] < 0] = -np.inf
            slots = np.argpartition(rough, self.n - wanted)[self.n - wanted :]
            slots.sort()  # the gather below then reads the matrix front to back
            return self._best(slots, self.mat[slots] @ query, k), Candidates(self, slots)

    def _start_graph_build(self) -> None:
        """Start a graph (re)build in the background when the scope is large enough for one
        and has none, or only a stale one (caller holds the lock)."""
        if not self.use_graph or self._building is not None:
            return
        if len(self.pos) < graph_index.GRAPH_MIN_DOCS:
            return
        if self.graph is not None and not self.graph.needs_rebuild():
            return
        if not graph_index.available():
            self.use_graph = False
            return
        self._written_while_building = []
        self._building = threading.Thread(
            target=self._build_graph, name="luna-graph-build", daemon=True
        )
        self._building.start()

    def _build_graph(self) -> None:
        """Fill a new graph from the live vectors, a chunk at a time under the lock (no copy
        of the whole matrix), then add what was written meanwhile and swap it in."""
        with contextlib.suppress(OSError):  # Linux: the nice value of this thread only
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
        graph = None
        try:
            with self.lock:
                slots = np.flatnonzero(self.ids[: self.n] >= 0)
                rng = np.random.default_rng(0)
                sample = self.mat[rng.choice(slots, min(len(slots), SKETCH_FIT_SAMPLE), False)]
            graph = graph_index.empty(sample)
            for lo in range(0, len(slots), GRAPH_BUILD_CHUNK):
                if graph is None:  # no faiss
                    break
                with self.lock:
                    part = slots[lo : lo + GRAPH_BUILD_CHUNK]
                    part = part[self.ids[part] >= 0]
                    rows = self.mat[part]
                graph.add(part, rows)
        except Exception:  # a failed build leaves the sketch serving
            log.exception("building the vector graph failed; the sketch scan serves")
            graph = None
        with self.lock:
            if graph is not None:
                written = np.unique(np.array(self._written_while_building, dtype=np.int64))
                written = written[self.ids[written] >= 0] if len(written) else written
                graph.add(written, self.mat[written], replacing=len(written))
                self.graph = graph
            else:
                self.use_graph = False
            self._written_while_building = []
            self._building = None

    def wait_for_graph(self, timeout: float | None = None) -> bool:
        """Wait for a graph build under way; True when a graph serves (benchmarks, tests)."""
        with self.lock:
            self._start_graph_build()
            building = self._building
        if building is not None:
            building.join(timeout)
        return self.graph is not None

    def knn_among(
        self, candidates: Candidates | None, query: np.ndarray, k: int
    ) -> list[tuple[int, float]]:
        """The ``k`` best of ``candidates`` (from :meth:`search` for a query near ``query``)
        for ``query``: the feedback pass scores the first pass's candidates again instead of
        scanning the sketch again (at 100k docs, 300 LoCoMo questions: recall@100 0.997
        against the exact scan, a sketch scan of its own 0.9996, in a fifth of the time).
        Without candidates of this index, :meth:`knn`."""
        if candidates is None or candidates.index is not self:
            return self.knn(query, k)
        with self.lock:  # slots stay valid: an index only grows (removals leave tombstones)
            slots = candidates.slots
            return self._best(slots, self.mat[slots] @ query, k)

    def _best(self, slots: np.ndarray, sims: np.ndarray, k: int) -> list[tuple[int, float]]:
        """The ``k`` best live ``slots`` by their ``sims``: (doc id, score), best first."""
        sims = np.where(self.ids[slots] >= 0, sims, -np.inf)
        k = min(k, len(slots))
        if k <= 0:
            return []
        top = np.argpartition(-sims, k - 1)[:k]
        top = top[np.argsort(-sims[top])]
        return [(int(self.ids[slots[i]]), float(sims[i])) for i in top if sims[i] > -np.inf]
