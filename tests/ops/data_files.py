"""Luna databases made quickly for the data-command tests: the real schema (the migrations),
rows written with plain SQLite, no embedding model loaded."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from luna.memory.storage.store import Store

CREATED = "2026-01-01T00:00:00Z"


def make_db(path: Path, texts: list[str], filler_mb: int = 0) -> Path:
    """A Luna database at ``path`` holding ``texts`` as searchable memories (plus
    ``filler_mb`` MB of unsearchable ones)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    store = Store(path, load_vec=False)
    try:
        store.migrate()
        with store.transaction() as tx:  # searchable, as the store writes them
            for text in texts:
                mid = tx.execute(
                    "INSERT INTO memories (text, created_at, updated_at) VALUES (?, ?, ?)",
                    (text, CREATED, CREATED),
                ).lastrowid
                store.index_doc(tx, "memory", mid, "owner", CREATED, text)
    finally:
        store.close()
    conn = sqlite3.connect(path)
    try:
        rows = [("x" * 1_000_000, CREATED, CREATED)] * filler_mb  # size only, not indexed
        conn.executemany(
            "INSERT INTO memories (text, created_at, updated_at) VALUES (?, ?, ?)", rows
        )
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return path


def memory_texts(path: Path) -> set[str]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return {r[0] for r in conn.execute("SELECT text FROM memories WHERE length(text) < 1000")}
    finally:
        conn.close()
