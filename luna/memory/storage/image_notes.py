"""What images show, in words: one description per content hash, searchable with its messages.

Invariants:
- One description per image (``sha256``); the first one stored wins (the same bytes show the
  same thing), so a describer that runs twice changes nothing.
- A description is kept only for an image some message carries (forgetting a session drops
  the descriptions of the images only it carried, ``luna.memory.storage.forget``).
- Storing a description re-indexes, in the same transaction, every message that carries the
  image: its search text (``session_log.searchable_text``) then says what the image shows, for
  full-text search and, once the indexer embeds it again, for vector search.
- Blocking functions; the ``Memory`` facade runs them in a worker thread.
"""

from __future__ import annotations

from collections.abc import Iterable

from luna.memory.storage import session_log
from luna.memory.storage.store import Store, now_iso
from luna.messages import Attachment


def described(store: Store, hashes: Iterable[str]) -> dict[str, str]:
    """sha256 -> description, for those of ``hashes`` already described."""
    wanted = sorted(set(hashes))
    if not wanted:
        return {}
    marks = ",".join("?" * len(wanted))
    rows = store.query(
        f"SELECT sha256, text FROM image_descriptions WHERE sha256 IN ({marks})", tuple(wanted)
    )
    return {sha: text for sha, text in rows}


def set_description(store: Store, sha256: str, text: str, model: str) -> int:
    """Store what image ``sha256`` shows and re-index the messages carrying it; returns how
    many messages were re-indexed (0 when it was described already, or when no message
    carries it any more: its sessions were forgotten while it was being described)."""
    with store.transaction(durable=False) as conn:
        if not conn.execute(
            "SELECT 1 FROM message_attachments WHERE sha256 = ? LIMIT 1", (sha256,)
        ).fetchone():
            return 0
        cur = conn.execute(
            "INSERT OR IGNORE INTO image_descriptions (sha256, text, model, created_at) "
            "VALUES (?, ?, ?, ?)",
            (sha256, text, model, now_iso()),
        )
        if not cur.rowcount:
            return 0
        rows = conn.execute(
            """SELECT m.id, m.session_id, m.scope, m.created_at, m.content
               FROM messages m
               WHERE m.id IN (SELECT message_id FROM message_attachments WHERE sha256 = ?)""",
            (sha256,),
        ).fetchall()
        for message_id, session_id, scope, created, content in rows:
            files = session_log.attachments_of(conn, int(message_id))
            notes = session_log.descriptions(conn, files)
            search = session_log.searchable_text(content or "", files, notes)
            store.index_doc(
                conn, "message", int(message_id), scope, created, search, thread=session_id
            )
        return len(rows)


def undescribed(store: Store, limit: int) -> list[Attachment]:
    """Up to ``limit`` images that messages carry and that have no description yet, newest
    first: what a describer stopped by a restart left undone."""
    out: dict[str, Attachment] = {}
    rows = store.query(
        """SELECT a.kind, a.mime, a.name, a.size, a.sha256 FROM message_attachments a
           WHERE a.kind = 'image' AND NOT EXISTS
               (SELECT 1 FROM image_descriptions d WHERE d.sha256 = a.sha256)
           ORDER BY a.message_id DESC, a.position LIMIT ?""",
        (limit * 4,),  # the same image in several messages counts once
    )
    for kind, mime, name, size, sha in rows:
        if sha not in out and len(out) < limit:
            out[sha] = Attachment(kind, mime, name, size, sha)
    return list(out.values())
