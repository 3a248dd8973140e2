"""Which memories a person's search is about: ``/memories QUERY`` in the REPL.

Why not recall as it is: recall fills its ``k`` with whatever ranks next (the nearest vectors
always exist), which suits a prompt and misleads a person reading a list of "hits". Here a
memory is shown only when it is related to the query: it shares one of the query's words
(a shared prefix of ``MIN_PREFIX`` letters counts: bike, bikes) or, once the embedding model is
ready, its cosine similarity to the query is at least ``MIN_COSINE``. Never waits for the
model to load.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from luna.memory.recall.query import query_terms
from luna.memory.recall.search import RecallItem

if TYPE_CHECKING:  # the facade calls nothing here; only its type
    from luna.memory import Memory

MIN_COSINE = 0.45  # all-MiniLM-L6-v2: paraphrases score about 0.5-0.8, unrelated text under 0.3
MIN_PREFIX = 4


def _shares_a_word(query_words: list[str], text: str) -> bool:
    words = query_terms(text)
    for q in query_words:
        for w in words:
            if q == w or (
                min(len(q), len(w)) >= MIN_PREFIX and (q.startswith(w) or w.startswith(q))
            ):
                return True
    return False


async def related_memories(
    memory: Memory, query: str, *, scope: str, k: int = 10
) -> list[RecallItem]:
    """Up to ``k`` memories related to ``query``, best first."""
    items = await memory.recall(query, scope=scope, session_id=None, k=max(k * 3, 30))
    close: set[int] = set()
    if memory.recall_mode == "hybrid":  # the model is ready: asking it costs one encode
        close = {
            row["id"]
            for row, cosine in await memory.similar_memories(query, scope=scope, k=k)
            if cosine >= MIN_COSINE
        }
    words = query_terms(query)
    related = [
        item
        for item in items
        if item.kind == "memory" and (item.id in close or _shares_a_word(words, item.text))
    ]
    return related[:k]
