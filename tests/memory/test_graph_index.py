"""The graph (HNSW) that picks a large scope's candidates: close to the exact scan, in step with
every write, built in the background while the sketch serves."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from luna.memory.storage import graph_index, vector_index
from luna.memory.storage.vector_index import VectorIndex


def clustered(n: int, dim: int = 64, seed: int = 0) -> np.ndarray:
    """Unit vectors around 200 centres: closer to text embeddings than uniform noise."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(200, dim))
    vecs = centres[rng.integers(0, 200, n)] + 0.3 * rng.normal(size=(n, dim))
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    return vecs.astype(np.float32)


@pytest.fixture
def small_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(graph_index, "GRAPH_MIN_DOCS", 2000)
    monkeypatch.setattr(vector_index, "GRAPH_BUILD_CHUNK", 700)  # several chunks


def filled(vecs: np.ndarray) -> VectorIndex:
    index = VectorIndex(vecs.shape[1])
    for i, v in enumerate(vecs):
        index.upsert(i + 1, v)
    return index


def test_graph_recall_at_10_against_the_exact_scan(small_graphs: None) -> None:
    vecs = clustered(6000)
    index = filled(vecs)
    assert index.graph is None
    assert index.wait_for_graph(60) and len(index.graph) == 6000
    queries = clustered(100, seed=1)
    shares = []
    for q in queries:
        exact = {i for i, _ in index.exact(q, 10)}
        got = index.knn(q, 10)
        shares.append(len(exact & {i for i, _ in got}) / 10)
        assert got[0][1] == pytest.approx(float(vecs[got[0][0] - 1] @ q), abs=1e-5)  # exact
    assert np.mean(shares) >= 0.98


def test_graph_follows_writes_and_deletes(small_graphs: None) -> None:
    vecs = clustered(3000)
    index = filled(vecs)
    assert index.wait_for_graph(60)
    q = vecs[99]
    assert index.knn(q, 1)[0][0] == 100
    index.remove(100)
    assert 100 not in {i for i, _ in index.knn(q, 10)}  # a tombstone never comes back
    index.upsert(5, q)  # a slot written again: found at its new place, with its new score
    best = index.knn(q, 1)[0]
    assert best[0] == 5 and best[1] == pytest.approx(1.0, abs=1e-5)
    far = -vecs[4]
    index.upsert(3001, far)  # a new doc after the build
    assert index.knn(far, 1)[0][0] == 3001
    assert index.graph.stale == 2


def test_writes_during_a_build_reach_the_new_graph(
    small_graphs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    vecs = clustered(3000)
    index = filled(vecs)
    reached, gate = threading.Event(), threading.Event()
    real_empty = graph_index.empty

    def slow_empty(sample: np.ndarray) -> graph_index.Graph | None:
        reached.set()  # the build has taken its list of slots
        gate.wait(30)  # and waits here while the test writes
        return real_empty(sample)

    monkeypatch.setattr(graph_index, "empty", slow_empty)
    q = vecs[10]
    assert index.knn(q, 1)[0][0] == 11  # the sketch serves while the graph is built
    assert index._building is not None and reached.wait(30)
    fresh = clustered(1, seed=7)[0]
    index.upsert(5000, fresh)
    index.upsert(11, -q)
    gate.set()
    assert index.wait_for_graph(60)
    assert index.knn(fresh, 1)[0][0] == 5000
    assert 11 not in {i for i, _ in index.knn(q, 5)}


def test_without_faiss_the_sketch_serves(
    small_graphs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(graph_index, "available", lambda: False)
    vecs = clustered(3000)
    index = filled(vecs)
    assert not index.wait_for_graph(5) and index.graph is None
    assert index.knn(vecs[0], 1)[0][0] == 1


def test_graph_search_widens_as_the_graph_grows(
    small_graphs: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fixed breadth loses recall as the graph grows (0.89 at 1M with 256): the breadth is
    at least GRAPH_EF_SEARCH and grows with the node count, up to GRAPH_EF_MAX."""
    index = filled(clustered(3000))
    assert index.wait_for_graph(60)
    graph = index.graph
    assert graph.breadth == graph_index.GRAPH_EF_SEARCH  # 3,000 nodes: the floor
    monkeypatch.setattr(graph_index, "GRAPH_EF_PER_NODE", 0.5)
    assert graph.breadth == 1500
    monkeypatch.setattr(graph_index, "GRAPH_EF_MAX", 1000)
    assert graph.breadth == 1000
    monkeypatch.setattr(graph_index, "GRAPH_EF_PER_NODE", 0.002)
    monkeypatch.setattr(graph_index, "GRAPH_EF_MAX", 4096)
    assert index.knn(index.mat[7], 1)[0][0] == 8


def test_the_feedback_pass_rescores_the_graphs_candidates(small_graphs: None) -> None:
    """One graph search per recall: the second (feedback) pass scores the first pass's
    candidates again, exactly, instead of searching the graph again."""
    vecs = clustered(3000)
    index = filled(vecs)
    assert index.wait_for_graph(60)
    searches = []
    real = index.graph.search
    index.graph.search = lambda q, k: searches.append(k) or real(q, k)  # type: ignore[method-assign]
    first, candidates = index.search(vecs[0], 10)
    assert candidates is not None and len(searches) == 1
    moved = 0.8 * vecs[0] + 0.2 * vecs[1]
    moved /= np.linalg.norm(moved)
    again = index.knn_among(candidates, moved, 10)
    assert len(searches) == 1
    assert {i for i, _ in again} <= {int(index.ids[s]) for s in candidates.slots}
    top, score = again[0]
    assert score == pytest.approx(float(vecs[top - 1] @ moved), abs=1e-5)
