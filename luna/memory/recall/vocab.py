"""How many docs hold a word: the FTS index's own vocabulary, for leaving out common words.

Invariants:
- A word is counted as the index stems it: a scratch FTS5 table with the index's tokenizer
  (``FTS_TOKENIZER``, the one migration m002_memory_index gave ``docs_fts``) turns it into the
  index's term, and ``fts5vocab`` over ``docs_fts`` says in how many docs that term is.
- The scratch tables live in the connection's ``temp`` schema: nothing in the database file is
  written, and no transaction of the store is touched.
- Blocking; runs under the store's lock, in the worker thread of the search that asks.
"""

from __future__ import annotations

from luna.memory.storage.store import Store

FTS_TOKENIZER = "porter unicode61"


def _prepare(store: Store) -> None:
    for sql in (
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.docs_vocab USING fts5vocab(main, docs_fts, 'row')",
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_words "
        f"USING fts5(word, tokenize = '{FTS_TOKENIZER}')",
        "CREATE VIRTUAL TABLE IF NOT EXISTS temp.query_stems "
        "USING fts5vocab(temp, query_words, 'instance')",
    ):
        store.conn.execute(sql)
    store.vocab_ready = True


def term_doc_counts(store: Store, words: list[str]) -> dict[str, int]:
    """{word: how many docs hold it} (0 for a word the index has never seen)."""
    with store.lock:
        if not store.vocab_ready:
            _prepare(store)
        conn = store.conn
        conn.execute("DELETE FROM temp.query_words")
        conn.executemany(
            "INSERT INTO temp.query_words (rowid, word) VALUES (?, ?)",
            [(i + 1, w) for i, w in enumerate(words)],
        )
        stems: dict[int, str] = {}
        for term, row in conn.execute("SELECT term, doc FROM temp.query_stems"):
            stems.setdefault(int(row) - 1, str(term))
        out: dict[str, int] = {}
        for i, word in enumerate(words):
            stem = stems.get(i)
            found = None
            if stem is not None:
                found = conn.execute(
                    "SELECT doc FROM temp.docs_vocab WHERE term = ?", (stem,)
                ).fetchone()
            out[word] = int(found[0]) if found else 0
        return out
