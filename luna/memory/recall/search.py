"""Hybrid recall: FTS5 bm25 + sqlite-vec cosine candidates, fused (:mod:`.fusion`); prompt lines.

Invariants:
- The user's text goes through :mod:`luna.memory.recall.query`: a safe FTS5 query (never raises),
  date windows and mentioned speakers.
- Each half brings its best ``_pool(k)`` candidates (and every doc of a mentioned date
  window); :mod:`luna.memory.recall.fusion` ranks them.
- Pseudo-relevance feedback (Rocchio): the vector search runs a second time with the query
  vector moved ``PRF_BETA`` towards the best ``PRF_DOCS`` first-pass docs; its scores replace
  the first vector list. No second embedding: the doc vectors are already stored.
- Scope is an exact filter: a Discord user's scope never returns the owner's rows, and back.
- Two halves: :func:`keyword_hits` (date windows, FTS) needs no query vector, so the facade
  runs it while the query is being embedded; :func:`hybrid_search` adds the vector half and
  fuses. At 100k docs each half costs a few ms: FTS takes the best matches of every scope and
  then keeps the scope's (no join per match), and a large scope's vectors are searched through
  a sketch in RAM (:mod:`luna.memory.storage.vector_index`).
- Blocking; the ``Memory`` facade runs both halves in worker threads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from luna.memory.recall.fusion import Signals, feedback_vector, normalized, ranking
from luna.memory.recall.query import QueryPlan, build_fts_query, plan_query, query_terms
from luna.memory.recall.vocab import term_doc_counts
from luna.memory.storage.store import Store
from luna.memory.storage.vector_index import Candidates

__all__ = [
    "KeywordHits",
    "RecallItem",
    "build_fts_query",
    "format_recall",
    "hybrid_search",
    "keyword_hits",
    "query_terms",
]

FTS_OVERFETCH = 3  # FTS asks for this many times the pool before keeping the scope's rows
# A query word in more than COMMON_SHARE of the docs is left out of FTS once the index holds
# COMMON_MIN_DOCS docs (and other words remain). At 100k docs it cuts FTS p95 from ~50 to
# ~12 ms on two busy cores; measured quality cost there, LoCoMo conversation 0 among 100k
# distractors: R@10 0.630 -> 0.622, R@5 0.588 -> 0.582. Below the size, FTS is cheap and exact.
COMMON_SHARE = 0.1
COMMON_MIN_DOCS = 20_000
CTX_WEIGHT = 0.5  # bm25 weight of a doc's neighbours' text relative to its own
WINDOW_MAX_DOCS = 2000
# The most results one search returns: sqlite-vec refuses a KNN query for more than 4096
# neighbours, so every vector pool is capped there too (see nearest).
MAX_K = 4096
CHARS_PER_TOKEN = 4
PRF_DOCS = 1  # pseudo-relevance feedback: best first-pass docs whose centroid moves the query
PRF_BETA = 0.2  # how far the query vector moves towards that centroid (0 = no feedback)


@dataclass(frozen=True)
class RecallItem:
    """One recalled row. ``id`` is the message, memory or summary id of its ``kind``."""

    kind: str  # "message" | "memory" | "summary"
    id: int
    text: str
    created_at: str
    source: str  # user / assistant / tool / import / summary
    score: float
    external_id: str | None = None
    session_id: str | None = None
    importance: int | None = None
    superseded_by: int | None = None


def _bm25(
    store: Store, match: str, scope: str, limit: int, ids: list[int] | None = None
) -> list[tuple]:
    weights = f"bm25(docs_fts, 1.0, {CTX_WEIGHT})"
    if ids is None:
        # The best matches of every scope, then the scope's: a join to ``docs`` per match
        # costs a third of the query at 100k docs. A scope that is a minority of the matches
        # gets the join below.
        rows = store.query(
            f"SELECT rowid, -{weights} FROM docs_fts WHERE docs_fts MATCH ? "
            f"ORDER BY {weights} LIMIT ?",
            (match, limit * FTS_OVERFETCH),
        )
        if not rows:
            return []
        keep = set(_in_scope(store, [int(r[0]) for r in rows], scope))
        kept = [r for r in rows if int(r[0]) in keep]
        if len(kept) >= limit or len(rows) < limit * FTS_OVERFETCH:
            return kept[:limit]
    # CROSS JOIN keeps the FTS index as the outer loop (a plain JOIN let SQLite scan every
    # doc of the scope and run the MATCH once per doc: 40x slower).
    sql = (
        f"SELECT f.rowid, -{weights} FROM docs_fts f "
        "CROSS JOIN docs d ON d.id = f.rowid WHERE docs_fts MATCH ? AND d.scope = ?"
    )
    params: list[Any] = [match, scope]
    if ids is not None:
        sql += f" AND f.rowid IN ({','.join('?' * len(ids))})"
        params += ids
    sql += f" ORDER BY {weights} LIMIT ?"
    return store.query(sql, [*params, limit])


def _in_scope(store: Store, doc_ids: list[int], scope: str) -> list[int]:
    marks = ",".join("?" * len(doc_ids))
    # ``+scope``: look the ids up by rowid, never scan the scope's index (10 ms at 100k docs).
    sql = f"SELECT id FROM docs WHERE id IN ({marks}) AND +scope = ?"
    rows = store.query(sql, [*doc_ids, scope])
    return [int(r[0]) for r in rows]


def distinctive_terms(store: Store, terms: list[str]) -> list[str]:
    """``terms`` without the ones in more than ``COMMON_SHARE`` of the docs (unless none would
    be left), in an index of ``COMMON_MIN_DOCS`` docs or more: their bm25 weight is small, but
    scoring their long posting lists is most of an FTS query's time at 100k docs."""
    if len(terms) < 2 or store.doc_count() < COMMON_MIN_DOCS:
        return terms
    counts = term_doc_counts(store, terms)
    total = store.doc_count()
    keep = [t for t in terms if counts.get(t, 0) <= COMMON_SHARE * total]
    return keep or [min(terms, key=lambda t: counts.get(t, 0))]


def fts_scores(
    store: Store, match: str | None, scope: str, limit: int, window_ids: list[int]
) -> dict[int, float]:
    """bm25 (higher is better) of the best ``limit`` docs, plus any matching window docs."""
    if match is None:
        return {}
    scores = {int(i): float(s) for i, s in _bm25(store, match, scope, limit)}
    if window_ids:
        for i, s in _bm25(store, match, scope, len(window_ids), window_ids):
            scores.setdefault(int(i), float(s))
    return scores


@dataclass
class VectorHits:
    """The vector half's result: cosine of the nearest docs (and of every window doc)."""

    scores: dict[int, float]
    candidates: Candidates | None = None  # a large scope: the docs its sketch picked


def nearest(
    store: Store,
    query_vec: bytes | None,
    scope: str,
    limit: int,
    near: VectorHits | None = None,
) -> VectorHits:
    """The ``limit`` nearest docs to ``query_vec``.

    ``near`` is a pass for a query close to this one (the feedback pass's first pass): a large
    scope then scores its candidates again instead of scanning the sketch again. A large
    scope's search holds only its index's lock, not the store's.
    """
    if query_vec is None or not store.vector_enabled or store.dim is None:
        return VectorHits({})
    index = store.ram_index(scope)
    if index is None:
        rows = store.query(
            "SELECT rowid, distance FROM docs_vec WHERE embedding MATCH ? AND k = ? "
            "AND scope = ? ORDER BY distance",
            (query_vec, min(limit, MAX_K), scope),
        )
        return VectorHits({int(i): 1.0 - float(d) for i, d in rows})
    q = np.frombuffer(query_vec, dtype=np.float32)  # numpy beats sqlite-vec (see vector_index)
    if near is not None:
        return VectorHits(dict(index.knn_among(near.candidates, q, limit)))
    hits, candidates = index.search(q, limit)
    return VectorHits(dict(hits), candidates)


def with_windows(
    store: Store, query_vec: bytes, scope: str, hits: VectorHits, window_ids: list[int]
) -> VectorHits:
    """``hits`` plus the cosine of every embedded window doc it lacks."""
    missing = [i for i in window_ids if i not in hits.scores]
    if not missing:
        return hits
    scores = dict(hits.scores)
    q = np.frombuffer(query_vec, dtype=np.float32)
    index = store.ram_index(scope)
    if index is not None:  # one product (read back one by one: a third of a recall at 100k)
        scores.update(index.scores(q, missing))
        missing = [i for i in missing if i not in scores]
    for i in range(0, len(missing), 500):
        chunk = missing[i : i + 500]
        marks = ",".join("?" * len(chunk))
        got = store.query(f"SELECT rowid, embedding FROM docs_vec WHERE rowid IN ({marks})", chunk)
        for doc_id, blob in got:
            scores[int(doc_id)] = float(np.frombuffer(blob, dtype=np.float32) @ q)
    return replace(hits, scores=scores)


def vec_scores(
    store: Store, query_vec: bytes | None, scope: str, limit: int, window_ids: list[int]
) -> dict[int, float]:
    """Cosine similarity of the ``limit`` nearest docs, plus every embedded window doc."""
    hits = nearest(store, query_vec, scope, limit)
    if query_vec is None:
        return hits.scores
    return with_windows(store, query_vec, scope, hits, window_ids).scores


def window_docs(store: Store, plan: QueryPlan, scope: str) -> list[int]:
    ids: list[int] = []
    for start, end in plan.windows:
        ids += [
            int(r[0])
            for r in store.query(
                "SELECT id FROM docs WHERE scope = ? AND created_at >= ? AND created_at < ? "
                "ORDER BY created_at DESC LIMIT ?",
                (scope, start, end, WINDOW_MAX_DOCS),
            )
        ]
    return list(dict.fromkeys(ids))[:WINDOW_MAX_DOCS]


def _doc_vectors(store: Store, scope: str, doc_ids: list[int]) -> np.ndarray:
    """The stored (unit) vectors of ``doc_ids`` that have one, as rows of a matrix."""
    index = store.ram_index(scope)
    if index is not None:
        held = index.vectors(doc_ids)
        rows = [held[i] for i in doc_ids if i in held]
    else:
        marks = ",".join("?" * len(doc_ids))
        got = store.query(f"SELECT embedding FROM docs_vec WHERE rowid IN ({marks})", doc_ids)
        rows = [np.frombuffer(blob, dtype=np.float32) for (blob,) in got]
    if not rows:
        return np.zeros((0, store.dim or 0), dtype=np.float32)
    return np.vstack(rows)


@dataclass(frozen=True)
class KeywordHits:
    """The keyword half of a recall: what it needs no query vector for."""

    plan: QueryPlan
    in_window: list[int]
    fts: dict[int, float]  # normalized bm25 of the best docs


def keyword_hits(
    store: Store, query: str, *, scope: str, k: int, plan: QueryPlan | None = None
) -> KeywordHits:
    """Date windows and FTS for ``query``: run it while the query vector is being computed."""
    if plan is None:
        plan = plan_query(query, store.speakers(scope))
    in_window = window_docs(store, plan, scope) if plan.windows else []
    match = build_fts_query(" ".join(distinctive_terms(store, query_terms(plan.text))))
    fts = normalized(fts_scores(store, match, scope, _pool(k), in_window))
    return KeywordHits(plan, in_window, fts)


def _pool(k: int) -> int:  # candidates each half of a recall brings to the fusion
    return max(100, k * 10)


def hybrid_search(
    store: Store,
    query: str,
    query_vec: bytes | None,
    *,
    scope: str,
    k: int,
    exclude_session: tuple[str, int] | None = None,
    plan: QueryPlan | None = None,
    keywords: KeywordHits | None = None,
) -> list[RecallItem]:
    """The ``k`` best items for ``query`` in ``scope``.

    ``query_vec`` should embed ``plan.text``; ``keywords`` is :func:`keyword_hits` already run
    for this query. ``exclude_session=(session_id, cut)`` leaves out that session's messages
    after the cut: they are already in the prompt.
    """
    if keywords is None:
        keywords = keyword_hits(store, query, scope=scope, k=k, plan=plan)
    plan, in_window, fts = keywords.plan, keywords.in_window, keywords.fts
    pool = _pool(k)
    first = VectorHits({})
    if query_vec is not None:
        first = nearest(store, query_vec, scope, pool)
        first = with_windows(store, query_vec, scope, first, in_window)
    vec = normalized(first.scores)
    candidates = set(fts) | set(vec)
    if not candidates:
        return []
    details = _details(store, list(candidates))
    signals = Signals(fts, vec, set(in_window), {s.lower() for s in plan.speakers})

    def visible(d: dict[str, Any]) -> bool:
        if exclude_session and d["kind"] == "message":
            sid, cut = exclude_session
            return not (d["session_id"] == sid and d["ref_id"] > cut)
        return True

    scored = {i: signals.score(i, d) for i, d in details.items() if visible(d)}
    if query_vec is not None and vec and PRF_DOCS > 0 and PRF_BETA > 0:
        # Pseudo-relevance feedback: search again with the query vector moved towards the
        # best first-pass docs, so a paraphrase they share with a relevant doc is found even
        # when the question's own words are far from it.
        top = sorted(scored, key=scored.__getitem__, reverse=True)[:PRF_DOCS]
        moved = feedback_vector(query_vec, _doc_vectors(store, scope, top), PRF_BETA)
        again = nearest(store, moved, scope, pool, near=first)
        signals.vec = normalized(with_windows(store, moved, scope, again, in_window).scores)
        new = [i for i in signals.vec if i not in details]
        if new:
            details.update(_details(store, new))
        scored = {i: signals.score(i, d) for i, d in details.items() if visible(d)}
    ranked = ranking(scored, details)
    best = sorted(ranked, key=ranked.__getitem__, reverse=True)[:k]
    return [_item(details[i], ranked[i]) for i in best]


def _item(d: dict[str, Any], score: float) -> RecallItem:
    return RecallItem(
        kind=d["kind"],
        id=d["ref_id"],
        text=d["text"],
        created_at=d["created_at"],
        source=d["source"],
        score=round(score, 6),
        external_id=d.get("external_id"),
        session_id=d.get("session_id"),
        importance=d.get("importance"),
        superseded_by=d.get("superseded_by"),
    )


def _details(store: Store, doc_ids: list[int]) -> dict[int, dict[str, Any]]:
    marks = ",".join("?" * len(doc_ids))
    docs = store.query(
        f"SELECT id, kind, ref_id, created_at, speaker, thread FROM docs WHERE id IN ({marks})",
        doc_ids,
    )
    out: dict[int, dict[str, Any]] = {}
    by_kind: dict[str, dict[int, int]] = {"message": {}, "memory": {}, "summary": {}}
    for doc_id, kind, ref_id, created_at, speaker, thread in docs:
        out[doc_id] = {
            "kind": kind,
            "ref_id": ref_id,
            "created_at": created_at,
            "speaker": speaker,
            "thread": thread,
        }
        by_kind[kind][ref_id] = doc_id

    def fill(kind: str, sql: str, cols: list[str]) -> None:
        refs = list(by_kind[kind])
        if not refs:
            return
        qs = ",".join("?" * len(refs))
        for row in store.query(sql.format(qs), refs):
            d = out[by_kind[kind][row[0]]]
            d.update(zip(cols, row[1:], strict=True))

    fill("message", MESSAGE_TEXT, ["text", "source", "session_id"])
    fill(
        "memory",
        "SELECT id, text, source, session_id, importance, superseded_by, external_id, "
        "created_at FROM memories WHERE id IN ({})",
        [
            "text",
            "source",
            "session_id",
            "importance",
            "superseded_by",
            "external_id",
            "created_at",
        ],
    )
    fill(
        "summary",
        "SELECT id, text, 'summary', session_id FROM summaries WHERE id IN ({})",
        ["text", "source", "session_id"],
    )
    return {k: v for k, v in out.items() if "text" in v}


# A message as recalled: its text, then what each of its described images shows (the words
# it was found by; ``luna.memory.storage.image_notes``).
MESSAGE_TEXT = """SELECT m.id, ltrim(m.content || coalesce((
        SELECT group_concat(char(10) || '[image ' || a.name || ': ' || d.text || ']', '')
        FROM message_attachments a JOIN image_descriptions d ON d.sha256 = a.sha256
        WHERE a.message_id = m.id), ''), char(10)), m.role, m.session_id
    FROM messages m WHERE m.id IN ({})"""


def format_recall(items: list[RecallItem], budget_tokens: int) -> str:
    """Render recalled items for the prompt, best first, within ~``budget_tokens`` tokens.

    One line per item: ``- [YYYY-MM-DD, <source> <kind> #id] text`` (long texts are cut with
    an ellipsis; superseded facts are marked). Returns "" when nothing fits.
    """
    budget = max(0, budget_tokens) * CHARS_PER_TOKEN
    lines: list[str] = []
    used = 0
    for it in items:
        date = (it.created_at or "")[:10] or "unknown date"
        tag = f"{it.source} {it.kind}" if it.kind != it.source else it.kind
        note = " (outdated: superseded)" if it.superseded_by else ""
        head = f"- [{date}, {tag} #{it.id}{note}] "
        text = " ".join(it.text.split())
        room = budget - used - len(head) - 1
        if room < 40:
            break
        if len(text) > room:
            text = text[: room - 1].rstrip() + "…"
        line = head + text
        lines.append(line)
        used += len(line) + 1
    return "\n".join(lines)
