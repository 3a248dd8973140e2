"""Hybrid recall: a safe FTS5 query, sqlite-vec KNN, reciprocal-rank fusion, prompt formatting.

Invariants:
- Any user text becomes a valid FTS5 query or None: every token is quoted, so punctuation,
  quotes, ``AND``/``OR``/``NOT``/``NEAR``, ``*`` and ``?`` are plain words; nothing raises.
  Stopwords are dropped unless nothing else is left.
- Relevance decides the order: fused score = Σ weight / (RRF_K + rank). Recency and importance
  add at most ``TIE_BREAK`` in total, less than one rank step, so they only break near-ties.
- A superseded memory ranks below its replacement whenever both are recalled.
- Scope is an exact filter: a Discord user's scope never returns the owner's rows, and back.
- Blocking; the ``Memory`` facade runs :func:`hybrid_search` in a worker thread.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from typing import Any

from luna.memory.store import Store

RRF_K = 60
FTS_WEIGHT = 1.0
VEC_WEIGHT = 1.0
TIE_BREAK = 1e-4  # total bonus for recency + importance; one rank step near the top is ~2.6e-4
RECENCY_HALF_LIFE_DAYS = 90.0
SUPERSEDED_FACTOR = 0.5
CHARS_PER_TOKEN = 4

_TOKEN = re.compile(r"\w+", re.UNICODE)
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves s t don didn doesn isn wasn weren won wouldn ll ve re d m o y ever also""".split()
)


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


def query_terms(text: str) -> list[str]:
    """Distinct lowercase word tokens of ``text``, stopwords dropped unless that leaves none."""
    tokens = [t.lower() for t in _TOKEN.findall(text or "")]
    tokens = [t for t in tokens if t.strip("_")]
    seen: dict[str, None] = {}
    for t in tokens:
        seen.setdefault(t, None)
    words = list(seen)
    content = [w for w in words if w not in STOPWORDS]
    return content or words


def build_fts_query(text: str) -> str | None:
    """A safe FTS5 MATCH expression (OR of quoted terms), or None when there are no words."""
    terms = query_terms(text)
    if not terms:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms[:64])


def _recency(created_at: str, now: dt.datetime) -> float:
    try:
        when = dt.datetime.fromisoformat(created_at)
    except ValueError:
        return 0.0
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    age_days = max(0.0, (now - when).total_seconds() / 86400)
    return math.exp(-age_days * math.log(2) / RECENCY_HALF_LIFE_DAYS)


def fts_ranked(store: Store, query: str, scope: str, limit: int) -> list[int]:
    """Doc ids matching ``query`` in ``scope``, best bm25 first."""
    match = build_fts_query(query)
    if match is None:
        return []
    rows = store.query(
        "SELECT f.rowid FROM docs_fts f JOIN docs d ON d.id = f.rowid "
        "WHERE docs_fts MATCH ? AND d.scope = ? ORDER BY f.rank LIMIT ?",
        (match, scope, limit),
    )
    return [r[0] for r in rows]


def vec_ranked(store: Store, query_vec: bytes, scope: str, limit: int) -> list[int]:
    """Doc ids nearest to ``query_vec`` (cosine) in ``scope``."""
    if not store.vector_enabled or store.dim is None:
        return []
    rows = store.query(
        "SELECT rowid FROM docs_vec WHERE embedding MATCH ? AND k = ? AND scope = ? "
        "ORDER BY distance",
        (query_vec, limit, scope),
    )
    return [r[0] for r in rows]


def rrf(rankings: list[tuple[list[int], float]]) -> dict[int, float]:
    """Reciprocal-rank fusion of ranked id lists with per-list weights."""
    scores: dict[int, float] = {}
    for ids, weight in rankings:
        for rank, doc_id in enumerate(ids, start=1):
            scores[doc_id] = scores.get(doc_id, 0.0) + weight / (RRF_K + rank)
    return scores


def hybrid_search(
    store: Store,
    query: str,
    query_vec: bytes | None,
    *,
    scope: str,
    k: int,
    exclude_session: tuple[str, int] | None = None,
) -> list[RecallItem]:
    """The ``k`` best items for ``query`` in ``scope``.

    ``exclude_session=(session_id, cut)`` leaves out that session's messages after the cut:
    they are already in the prompt.
    """
    pool = max(50, k * 5)
    rankings = [(fts_ranked(store, query, scope, pool), FTS_WEIGHT)]
    if query_vec is not None:
        rankings.append((vec_ranked(store, query_vec, scope, pool), VEC_WEIGHT))
    scores = rrf(rankings)
    if not scores:
        return []
    details = _details(store, list(scores))
    now = dt.datetime.now(dt.UTC)
    items: list[RecallItem] = []
    for doc_id, base in scores.items():
        d = details.get(doc_id)
        if d is None:
            continue
        if exclude_session and d["kind"] == "message":
            sid, cut = exclude_session
            if d["session_id"] == sid and d["ref_id"] > cut:
                continue
        importance = d.get("importance") or 5
        bonus = TIE_BREAK * 0.5 * (_recency(d["created_at"], now) + importance / 10)
        score = base + bonus
        if d.get("superseded_by"):
            score *= SUPERSEDED_FACTOR
        items.append(
            RecallItem(
                kind=d["kind"],
                id=d["ref_id"],
                text=d["text"],
                created_at=d["created_at"],
                source=d["source"],
                score=score,
                external_id=d.get("external_id"),
                session_id=d.get("session_id"),
                importance=d.get("importance"),
                superseded_by=d.get("superseded_by"),
            )
        )
    items = _below_replacements(items)
    items.sort(key=lambda it: it.score, reverse=True)
    return items[:k]


def _below_replacements(items: list[RecallItem]) -> list[RecallItem]:
    by_memory = {it.id: it for it in items if it.kind == "memory"}
    out = []
    for it in items:
        newer = by_memory.get(it.superseded_by) if it.superseded_by else None
        if newer is not None and it.score >= newer.score:
            it = RecallItem(**{**it.__dict__, "score": newer.score * SUPERSEDED_FACTOR})
        out.append(it)
    return out


def _details(store: Store, doc_ids: list[int]) -> dict[int, dict[str, Any]]:
    marks = ",".join("?" * len(doc_ids))
    docs = store.query(
        f"SELECT id, kind, ref_id, created_at FROM docs WHERE id IN ({marks})", doc_ids
    )
    out: dict[int, dict[str, Any]] = {}
    by_kind: dict[str, dict[int, int]] = {"message": {}, "memory": {}, "summary": {}}
    for doc_id, kind, ref_id, created_at in docs:
        out[doc_id] = {"kind": kind, "ref_id": ref_id, "created_at": created_at}
        by_kind[kind][ref_id] = doc_id

    def fill(kind: str, sql: str, cols: list[str]) -> None:
        refs = list(by_kind[kind])
        if not refs:
            return
        qs = ",".join("?" * len(refs))
        for row in store.query(sql.format(qs), refs):
            d = out[by_kind[kind][row[0]]]
            d.update(zip(cols, row[1:], strict=True))

    fill(
        "message",
        "SELECT id, content, role, session_id FROM messages WHERE id IN ({})",
        ["text", "source", "session_id"],
    )
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
