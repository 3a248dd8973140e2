"""The numpy mirror of a scope's vectors (large scopes, and small ones within a budget) gives
the same neighbours as sqlite-vec."""

from __future__ import annotations

import numpy as np
import pytest

from luna.memory import Memory
from luna.memory.recall import search
from luna.memory.storage import store
from luna.memory.storage.vector_index import VectorIndex


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
    monkeypatch.setattr(store, "SMALL_SCOPE_MAX_DOCS", -1)  # sqlite-vec's answer first
    memory.store._ram_index.clear()
    small = search.vec_scores(memory.store, qvec, "owner", 3, [])
    assert memory.store.ram_index("owner") is None
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
    monkeypatch.setattr(store, "SMALL_SCOPE_MAX_DOCS", -1)  # sqlite-vec's answer first
    memory.store._ram_index.clear()
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


async def test_small_scope_is_mirrored_within_its_budget_with_sqlite_vec_results(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small scope is searched in RAM too (sqlite-vec reads 1024 vector slots for any KNN),
    with sqlite-vec's neighbours and cosines, kept in step with writes; past the budget of
    every small mirror together it is left to sqlite-vec."""
    texts = [f"Note {i}: the tulips on the balcony need water." for i in range(6)]
    ids = [await memory.add_memory(t) for t in [*texts, "The boat is called Aurora."]]
    qvec = await memory.embed_query("what is the boat called?")
    monkeypatch.setattr(store, "SMALL_SCOPE_MAX_DOCS", -1)
    memory.store._ram_index.clear()
    from_sqlite_vec = search.vec_scores(memory.store, qvec, "owner", 5, [])
    monkeypatch.undo()
    memory.store._ram_index.clear()
    index = memory.store.ram_index("owner")
    assert index is not None and len(index) == len(ids) and index.basis is None
    in_ram = search.vec_scores(memory.store, qvec, "owner", 5, [])
    assert list(in_ram) == list(from_sqlite_vec)
    assert in_ram == pytest.approx(from_sqlite_vec, abs=1e-5)
    await memory.forget(ids[-1])
    assert len(index) == len(ids) - 1 and memory.store.ram_index("owner") is index
    budget = (len(ids) - 2) * 4 * 384  # one vector short of the scope's mirror
    monkeypatch.setattr(store, "SMALL_MIRRORS_MAX_BYTES", budget)
    memory.store._ram_index.clear()
    assert memory.store.ram_index("owner") is None  # sqlite-vec, as for any scope before


def _unit(rows: np.ndarray) -> np.ndarray:
    return (rows / np.linalg.norm(rows, axis=-1, keepdims=True)).astype(np.float32)


def _embedding_like(rng: np.random.Generator, n: int, dim: int = 384) -> np.ndarray:
    """Unit vectors with the shape of sentence embeddings: most of their length in a few dozen
    directions (topics), the rest spread thinly over all of them."""
    topics = rng.standard_normal((48, dim))
    return _unit(rng.standard_normal((n, 48)) @ topics + rng.normal(0, 0.6, (n, dim)))


def _fitted(vecs: np.ndarray) -> VectorIndex:
    """An index of ``vecs`` (doc id = row), with its sketch fitted where it pays."""
    index = VectorIndex(vecs.shape[1])
    for i, v in enumerate(vecs):
        index.upsert(i, v)
    index.fit()
    return index


def test_split_exact_scan_matches_brute_force() -> None:
    from luna.memory.storage import vector_index

    rng = np.random.default_rng(3)
    n = vector_index.SPLIT_MIN_ROWS + 1000
    vecs = _unit(rng.standard_normal((n, 16)))
    index = VectorIndex(16)
    for i, v in enumerate(vecs):
        index.upsert(i, v)
    index.remove(11)
    q = _unit(vecs[0] + rng.normal(0, 0.3, 16))
    sims = vecs @ q
    sims[11] = -np.inf
    assert [i for i, _ in index.exact(q, 50)] == np.argsort(-sims)[:50].tolist()
    assert index.basis is None and index.knn(q, 50) == index.exact(q, 50)


def test_sketch_finds_the_exact_neighbours_and_follows_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through the sketch, the docs found are (all but a few of) the exact scan's, their scores
    are exact cosines, a deleted doc never comes back, a new one is found at once, and the
    directions are fitted again once the scope has doubled."""
    from luna.memory.storage import vector_index

    monkeypatch.setattr(vector_index, "RAM_INDEX_MIN_DOCS", 4000)
    monkeypatch.setattr(vector_index, "SKETCH_CANDIDATES", 400)
    rng = np.random.default_rng(5)
    vecs = _embedding_like(rng, 8100)
    index = _fitted(vecs[:4000])
    assert index.basis is not None and index.basis.shape == (384, vector_index.SKETCH_DIM)
    assert index.fitted_on == 4000
    queries = _unit(vecs[rng.choice(4000, 30)] + rng.normal(0, 0.05, (30, 384)))
    found = []
    for q in queries:
        hits, exact = index.knn(q, 20), index.exact(q, 20)
        found.append(len({i for i, _ in hits} & {i for i, _ in exact}) / 20)
        assert all(s == pytest.approx(float(vecs[i] @ q), abs=1e-5) for i, s in hits)
        assert [s for _, s in hits] == sorted((s for _, s in hits), reverse=True)
    assert np.mean(found) >= 0.99, found
    again = []  # the feedback pass: a query moved towards the best doc, scored among candidates
    for q in queries:
        hits, candidates = index.search(q, 20)
        assert candidates is not None and candidates.index is index
        moved = _unit(0.8 * q + 0.2 * vecs[hits[0][0]])
        among = index.knn_among(candidates, moved, 20)
        again.append(len({i for i, _ in among} & {i for i, _ in index.exact(moved, 20)}) / 20)
        assert all(s == pytest.approx(float(vecs[i] @ moved), abs=1e-5) for i, s in among)
    assert np.mean(again) >= 0.99, again
    # candidates of another index (one rebuilt meanwhile) are not used
    stale = vector_index.Candidates(VectorIndex(384), candidates.slots[:10])
    assert index.knn_among(stale, q, 5) == index.knn(q, 5)
    index.remove(among[0][0])
    assert among[0][0] not in [i for i, _ in index.knn_among(candidates, moved, 20)]
    best = index.knn(queries[0], 1)[0][0]
    index.remove(best)
    assert best not in [i for i, _ in index.knn(queries[0], 20)]
    index.upsert(99_999, queries[0])  # a new doc after the fit is in the sketch too
    assert index.knn(queries[0], 1)[0][0] == 99_999
    for i, v in enumerate(vecs[4000:], start=4000):
        index.upsert(i, v)
    assert index.fitted_on == 2 * 4000  # refitted when the live docs reached twice the fit


def test_sketch_is_left_out_where_it_cannot_pay() -> None:
    """Narrow vectors or too few docs: no sketch, every query scans the full vectors."""
    rng = np.random.default_rng(1)
    narrow = _fitted(_unit(rng.standard_normal((25_000, 16))))
    small = _fitted(_embedding_like(rng, 500))
    assert narrow.basis is None and small.basis is None


async def test_large_scope_recall_through_the_sketch_matches_the_exact_scan(
    memory: Memory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A scope big enough for the sketch (thresholds lowered): the store fits it when it
    builds the index, its nearest docs are the exact scan's, and a write after the fit is
    searchable at once."""
    from luna.memory.storage import vector_index

    monkeypatch.setattr(store, "RAM_INDEX_MIN_DOCS", 3000)
    monkeypatch.setattr(vector_index, "RAM_INDEX_MIN_DOCS", 3000)
    monkeypatch.setattr(vector_index, "SKETCH_CANDIDATES", 300)
    rng = np.random.default_rng(11)
    vecs = _embedding_like(rng, 3200)
    records = [{"text": f"note number {i}", "id": f"n{i}"} for i in range(len(vecs))]
    for lo in range(0, len(vecs), 800):
        await memory.add_memories(records[lo : lo + 800], vectors=vecs[lo : lo + 800])
    memory.store._ram_index.clear()
    index = memory.store.ram_index("owner")
    assert index is not None and index.basis is not None  # fitted as it was built
    queries = _unit(vecs[rng.choice(len(vecs), 10)] + rng.normal(0, 0.05, (10, 384)))
    sketched = [search.vec_scores(memory.store, q.tobytes(), "owner", 20, []) for q in queries]
    index.clear_sketch()
    exact = [search.vec_scores(memory.store, q.tobytes(), "owner", 20, []) for q in queries]
    index.fit()
    shared = [len(set(a) & set(b)) / 20 for a, b in zip(sketched, exact, strict=True)]
    assert np.mean(shared) >= 0.98, shared
    for a, b in zip(sketched, exact, strict=True):
        assert {i: a[i] for i in a if i in b} == pytest.approx({i: b[i] for i in a if i in b})
    new = await memory.add_memory("a note written after the fit")
    assert memory.store.ram_index("owner") is index
    doc = memory.store.query("SELECT id FROM docs WHERE kind = 'memory' AND ref_id = ?", (new,))
    vec = memory.store.query("SELECT embedding FROM docs_vec WHERE rowid = ?", (doc[0][0],))
    assert list(search.vec_scores(memory.store, vec[0][0], "owner", 1, [])) == [doc[0][0]]


def test_searches_and_writes_from_two_threads_keep_the_index_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The index's own lock: searches in one thread while another writes, grows the arrays and
    refits the sketch never see a half-made index (the store no longer serializes them)."""
    import threading

    from luna.memory.storage import vector_index

    monkeypatch.setattr(vector_index, "RAM_INDEX_MIN_DOCS", 1500)
    monkeypatch.setattr(vector_index, "SKETCH_CANDIDATES", 200)
    rng = np.random.default_rng(9)
    vecs = _embedding_like(rng, 4000)
    index = _fitted(vecs[:1500])
    errors: list[BaseException] = []
    done = threading.Event()

    def search() -> None:
        picks = np.random.default_rng(10)
        try:
            while not done.is_set():
                q = vecs[int(picks.integers(0, 500))]  # docs the writer never removes
                hits, candidates = index.search(q, 10)
                assert len(hits) == 10 and hits[0][1] == pytest.approx(1.0, abs=1e-4)
                index.knn_among(candidates, q, 10)
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    reader = threading.Thread(target=search)
    reader.start()
    try:
        for i, v in enumerate(vecs[1500:], start=1500):  # grows past 2048 rows, refits at 3000
            index.upsert(i, v)
            if i % 7 == 0:
                index.remove(i - 1000)
    finally:
        done.set()
        reader.join(timeout=30)
    assert not errors, errors
    assert index.fitted_on == 3000 and len(index.mat) >= 4000
    assert index.knn(vecs[3999], 1)[0][0] == 3999
