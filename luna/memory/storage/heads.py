"""Stored session heads: the declarations a session keeps in front of its history.

A head is a JSON object (tool specs, the skills index) that ``luna.agent.head`` builds; this
module only stores it. Invariants:
- One head per (session, compaction cut): the first one saved for a cut is the one kept
  (``save`` never replaces it), so a session's head cannot change between compactions.
- ``current`` returns the session's cut and the head saved for that cut, if any, in one read.
- Blocking functions; the ``Memory`` facade runs them in a worker thread.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from luna.memory.storage import db
from luna.memory.storage.store import Store, now_iso


def current(store: Store, session_id: str) -> tuple[int, dict[str, Any] | None]:
    """(the session's compaction cut or 0, the head saved for that cut or None)."""
    rows = store.query(
        """SELECT coalesce(s.cut_message_id, 0), h.head
           FROM (SELECT ? AS id) q
           LEFT JOIN summaries s ON s.session_id = q.id
           LEFT JOIN session_heads h
             ON h.session_id = q.id AND h.cut = coalesce(s.cut_message_id, 0)""",
        (session_id,),
    )
    cut, text = rows[0]
    return int(cut), (json.loads(text) if text is not None else None)


def save(store: Store, session_id: str, cut: int, head: dict[str, Any]) -> dict[str, Any]:
    """Keep ``head`` for (session, cut) unless one is kept already; returns the kept one."""
    # Key order is kept: the chat template renders the specs as JSON text, so it reaches the
    # prompt (and with it the KV cache).
    text = json.dumps(head, ensure_ascii=False)
    with store.transaction(durable=False) as conn:
        conn.execute(
            "INSERT OR IGNORE INTO session_heads (session_id, cut, head, created_at) "
            "VALUES (?, ?, ?, ?)",
            (session_id, cut, text, now_iso()),
        )
        kept = conn.execute(
            "SELECT head FROM session_heads WHERE session_id = ? AND cut = ?", (session_id, cut)
        ).fetchone()[0]
    return json.loads(kept)


HISTORY_SQL = "SELECT cut, created_at, head FROM session_heads WHERE session_id = ? ORDER BY cut"


def history(store: Store, session_id: str) -> list[tuple[int, str, dict[str, Any]]]:
    """Every head the session has had: (cut, created_at, head), oldest first."""
    rows = store.query(HISTORY_SQL, (session_id,))
    return [(int(cut), created, json.loads(text)) for cut, created, text in rows]


def read_history(db_path: Path, session_id: str) -> list[tuple[int, str, dict[str, Any]]]:
    """``history`` read-only from the file, beside a running Luna (empty when there is none:
    no database yet, or one from before heads were kept)."""
    if not db_path.exists():
        return []
    conn = db.sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True, timeout=5)
    try:
        rows = conn.execute(HISTORY_SQL, (session_id,)).fetchall()
    except db.sqlite3.OperationalError:
        return []  # no such table: a database from before m007
    finally:
        conn.close()
    return [(int(cut), created, json.loads(text)) for cut, created, text in rows]
