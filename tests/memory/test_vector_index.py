"""The numpy mirror used for large scopes gives the same neighbours as sqlite-vec."""

from __future__ import annotations

import numpy as np
import pytest

from luna.memory import Memory, search, store
from luna.memory.vector_index import VectorIndex


def test_vector_index_knn_upsert_remove() -> None:
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(3000, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    index = VectorIndex(8)
    for i, v in enumerate(vecs):
        index.upsert(i + 1, v)
    q = vecs[41]
    hits = index.knn(q, 5)
    assert hits[0][0] == 42 and hits[0][1] == pytest.approx(1.0, abs=1e-5)
    expected = (np.argsort(-(vecs @ q))[:5] + 1).tolist()
    assert [h[0] for h in hits] == expected
    index.remove(42)
    assert 42 not in [h[0] for h in index.knn(q, 5)]
    index.upsert(7, q)  # replace in place
    assert index.knn(q, 1)[0][0] == 7 and len(index) == 2999


async def test_large_scope_uses_ram_index_with_same_results(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = ["The boat is called Aurora.", "My sister lives in Oslo.", "I hate coriander."]
    ids = [await memory.add_memory(t) for t in texts]
    qvec = await memory.embed_query("what's my boat's name")
    small = search.vec_scores(memory.store, qvec, "owner", 3, [])
    monkeypatch.setattr(store, "RAM_INDEX_MIN_DOCS", 1)
    memory.store._ram_index.clear()
    assert memory.store.ram_index("owner") is not None
    big = search.vec_scores(memory.store, qvec, "owner", 3, [])
    assert list(big) == list(small)
    assert big == pytest.approx(small, abs=1e-5)
    new = await memory.add_memory("The car is called Nebula.")
    assert new in search.vec_scores(memory.store, qvec, "owner", 10, [])
    await memory.forget(ids[0])
    assert ids[0] not in search.vec_scores(memory.store, qvec, "owner", 10, [])


async def test_window_docs_of_a_large_scope_score_as_in_sqlite_vec(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A date window's docs beyond the nearest ones get their cosine from the RAM index
    (not read back from sqlite-vec one by one), the same figures as sqlite-vec gives."""
    texts = [f"Note {i}: the tulips on the balcony need water." for i in range(12)]
    ids = [await memory.add_memory(t) for t in texts]
    docs = [
        int(r[0])
        for r in memory.store.query("SELECT id FROM docs WHERE kind = 'memory' ORDER BY ref_id", ())
    ]
    assert len(docs) == len(ids)
    qvec = await memory.embed_query("what about the boat?")
    small = search.vec_scores(memory.store, qvec, "owner", 1, docs)
    monkeypatch.setattr(store, "RAM_INDEX_MIN_DOCS", 1)
    memory.store._ram_index.clear()
    assert memory.store.ram_index("owner") is not None

    def no_vector_reads(sql: str, params=()):  # the RAM path never reads docs_vec rows
        assert "FROM docs_vec WHERE rowid IN" not in sql, sql
        return real_query(sql, params)

    real_query = memory.store.query
    monkeypatch.setattr(memory.store, "query", no_vector_reads)
    big = search.vec_scores(memory.store, qvec, "owner", 1, docs)
    assert set(big) == set(small) == set(docs)
    assert big == pytest.approx(small, abs=1e-5)


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(np.float32)


def test_vector_index_split_scan_and_feedback_pass_are_exact() -> None:
    from luna.memory import vector_index

    rng = np.random.default_rng(3)
    n = vector_index.SPLIT_MIN_ROWS + vector_index.NEAR_POOL + 1000
    vecs = _unit(rng.standard_normal((n, 16)))
    index = VectorIndex(16)
    for i, v in enumerate(vecs):
        index.upsert(i, v)
    index.remove(11)
    q = _unit(vecs[0] + rng.normal(0, 0.3, 16))
    sims = index.sims(q)  # split over threads
    assert np.allclose(sims[: index.n][index.ids[: index.n] >= 0], (vecs @ q)[np.arange(n) != 11])
    for c in (vecs[1], _unit(-q)):  # a nearby doc (the pool suffices), the far side (it does not)
        a, b = 0.8, 0.2
        moved = _unit(a * q + b * c)
        norm = float(np.linalg.norm(a * q + b * c))
        near = index.knn_near(sims, moved, a / norm, b / norm, 100)
        brute = index.knn(moved, 100)
        assert [i for i, _ in near] == [i for i, _ in brute]
        assert 11 not in [i for i, _ in near]
