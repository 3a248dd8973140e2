"""Luna databases made quickly for the data-command tests: the real schema (the migrations),
rows written with plain SQLite, no embedding model loaded."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from luna.memory.store import Store


def make_db(path: Path, texts: list[str], filler_mb: int = 0) -> Path:
    """A Luna database at ``path`` holding ``texts`` as memories (plus ``filler_mb`` MB)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    store = Store(path, load_vec=False)
    try:
        store.migrate()
    finally:
        store.close()
    conn = sqlite3.connect(path)
    try:
        rows = [(t, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z") for t in texts]
        rows += [("x" * 1_000_000, "2026-01-01T00:00:00Z", "2026-01-01T00:00:00Z")] * filler_mb
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
