"""One recall, as the Memory facade runs it: the keyword half runs while the query is embedded.

Invariants:
- The query vector is asked for first, before any database work: it is the longest step and
  needs no database (a turn's own durable commit holds the store's lock meanwhile). It is
  computed in the embedding process (``embed``) while the keyword half
  (:func:`luna.memory.recall.search.keyword_hits`) runs in a worker thread; then the vector half
  and the fusion (:func:`luna.memory.recall.search.hybrid_search`) run in a worker thread too.
  Nothing blocking runs on the event loop.
- ``mode`` is decided by the caller before anything runs (``fts_warming`` or ``fts``: no vector
  is asked for, nothing waits for the model); a vector that fails to come back turns the recall
  keyword-only and the logged mode says what actually served it.
- With ``on_model_changed``, the keyword half's thread also checks that the stored vectors are
  still the model's this process embeds with (``Store.vectors_current``); when they are not,
  ``on_model_changed`` is called, the query vector is dropped unused and the recall is
  keyword-only: a search never mixes two models.
- One ``memory_op`` ``recall`` event per recall: mode, duration, the embedding's share, count.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable

from luna.memory.recall.query import plan_query
from luna.memory.recall.search import (
    MAX_K,
    KeywordHits,
    RecallItem,
    hybrid_search,
    keyword_hits,
)
from luna.memory.storage import session_log
from luna.memory.storage.store import Store
from luna.observe import Timer, log_event


async def _timed(embed: Callable[[str], Awaitable[bytes | None]], text: str) -> tuple:
    with Timer() as t:
        vec = await embed(text)
    return vec, t.ms


def _keywords(
    store: Store, query: str, scope: str, k: int, today: dt.date, check_model: bool
) -> tuple[KeywordHits, bool]:
    """The keyword half, and whether the stored vectors are still this process's model's
    (True when not asked to check)."""
    current = store.vectors_current() if check_model else True
    plan = plan_query(query, store.speakers(scope), today)
    return keyword_hits(store, query, scope=scope, k=k, plan=plan), current


def _fused(
    store: Store,
    query: str,
    qvec: bytes | None,
    keywords: KeywordHits,
    scope: str,
    k: int,
    session_id: str | None,
) -> list[RecallItem]:
    exclude = None
    if session_id is not None:
        _, cut = session_log.summary(store, session_id)
        exclude = (session_id, cut)
    return hybrid_search(
        store, query, qvec, scope=scope, k=k, exclude_session=exclude, keywords=keywords
    )


async def run_recall(
    store: Store,
    query: str,
    *,
    scope: str,
    k: int,
    session_id: str | None,
    mode: str,
    embed: Callable[[str], Awaitable[bytes | None]],
    mode_now: Callable[[], str],
    today: dt.date,
    on_model_changed: Callable[[], None] | None = None,
) -> list[RecallItem]:
    """The ``k`` best items for ``query`` (see :meth:`luna.memory.Memory.recall`); ``today``
    resolves the query's relative dates."""
    k = min(k, MAX_K)  # sqlite-vec's limit (luna.memory.recall.search)
    embed_ms = 0.0
    with Timer() as t:
        # The vector is asked for before any database work, for the words the speakers seen
        # last leave (speaker names are not searched for); the rare query whose words a new
        # speaker changes is embedded again.
        text = plan_query(query, store.speakers_seen(scope), today).text
        embedding = asyncio.create_task(_timed(embed, text)) if mode == "hybrid" else None
        try:
            keywords, current = await asyncio.to_thread(
                store.checked,
                _keywords,
                store,
                query,
                scope,
                k,
                today,
                on_model_changed is not None,
            )
            if not current and on_model_changed is not None:
                on_model_changed()  # another model's vectors now: keyword-only
                mode = mode_now()
                if embedding is not None:
                    embedding.cancel()
                    embedding = None
            if embedding is not None and keywords.plan.text != text:
                embedding.cancel()
                text = keywords.plan.text
                embedding = asyncio.create_task(_timed(embed, text))
            qvec, embed_ms = await embedding if embedding is not None else (None, 0.0)
        finally:
            if embedding is not None and not embedding.done():
                embedding.cancel()
        if mode == "hybrid" and qvec is None and text.strip():
            mode = mode_now()  # the model failed just now: keyword-only
        items = await asyncio.to_thread(
            store.checked, _fused, store, query, qvec, keywords, scope, k, session_id
        )
    log_event(
        "memory_op",
        op="recall",
        mode=mode,
        duration_ms=round(t.ms, 2),
        embed_ms=round(embed_ms, 2),
        count=len(items),
    )
    return items
