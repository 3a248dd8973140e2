"""Memory rows: writing them (one transaction per batch, external ids unique per scope),
forgetting, superseding and restating them, and finding the ones nearest a vector.

Invariants:
- A memory, its ``docs`` row and its FTS row are written together; its vector follows in the
  next transaction (a crash in between leaves it to the indexer's backfill).
- Imported memories (``source == "import"``) with a session form a thread: neighbours give each
  other FTS context and a little of their embedding. Other memories stand alone.
- Blocking; the ``Memory`` facade calls this in a worker thread.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from luna.memory.storage import db
from luna.memory.storage.store import Store, VectorModelChangedError, now_iso

log = logging.getLogger(__name__)


def insert_memories(
    store: Store, records: list[dict[str, Any]], vecs: Any
) -> tuple[list[int], int]:
    """Write memories and their index rows in one transaction, then their vectors.

    Returns (new ids, number skipped because their external id already exists in the scope).
    """
    ids: list[int] = []
    vec_rows: list[tuple[int, str, bytes]] = []
    skipped = 0
    now = now_iso()
    with store.transaction() as conn:
        for i, r in enumerate(records):
            scope = r.get("scope") or "owner"
            ext = r.get("id")
            ext = None if ext is None else str(ext)
            if (
                ext is not None
                and conn.execute(
                    "SELECT 1 FROM memories WHERE scope = ? AND external_id = ?", (scope, ext)
                ).fetchone()
            ):
                skipped += 1
                continue
            created = r.get("created_at") or now
            importance = min(10, max(1, int(r.get("importance") or 5)))
            cur = conn.execute(
                """INSERT INTO memories (text, importance, source, speaker, scope, session_id,
                       external_id, created_at, updated_at) VALUES (?,?,?,?,?,?,?,?,?)""",
                (
                    r["text"],
                    importance,
                    r.get("source") or "user",
                    r.get("speaker"),
                    scope,
                    r.get("session_id"),
                    ext,
                    created,
                    now,
                ),
            )
            mem_id = db.inserted_id(cur)
            doc_id = store.index_doc(
                conn,
                "memory",
                mem_id,
                scope,
                created,
                r["text"],
                thread=r.get("session_id") if r.get("source") == "import" else None,
                speaker=r.get("speaker"),
            )
            ids.append(mem_id)
            if vecs is not None:
                vec_rows.append((doc_id, scope, vecs[i].tobytes()))
    try:
        store.store_vectors(vec_rows)
    except VectorModelChangedError as exc:  # a reindex beside us: the memories stay, FTS finds
        log.info("memory: %s; the new memories wait for the new model's vectors", exc)
    return ids, skipped


def forget(store: Store, memory_id: int) -> bool:
    """Delete a memory and its index rows; False when there is no such memory."""
    with store.transaction(durable=True) as conn:
        row = conn.execute(
            "SELECT id FROM docs WHERE kind = 'memory' AND ref_id = ?", (memory_id,)
        ).fetchone()
        if row is not None:
            store.unindex_doc(conn, row[0])
        return conn.execute("DELETE FROM memories WHERE id = ?", (memory_id,)).rowcount > 0


def supersede(store: Store, old_id: int, new_id: int) -> None:
    """Mark memory ``old_id`` as replaced by ``new_id``."""
    with store.transaction(durable=True) as conn:
        conn.execute(
            "UPDATE memories SET superseded_by = ?, updated_at = ? WHERE id = ?",
            (new_id, now_iso(), old_id),
        )


def touch(store: Store, memory_id: int, importance: int) -> None:
    """A fact restated: bump ``updated_at``, keep the higher importance."""
    with store.transaction() as conn:
        conn.execute(
            "UPDATE memories SET updated_at = ?, importance = max(importance, ?) WHERE id = ?",
            (now_iso(), importance, memory_id),
        )


def similar(store: Store, vec: bytes, scope: str, k: int) -> list[tuple[dict, float]]:
    """Live (not superseded) memories nearest to ``vec``: (row, cosine similarity)."""
    rows = store.query(
        "SELECT v.rowid, v.distance FROM docs_vec v WHERE v.embedding MATCH ? "
        "AND k = ? AND v.scope = ? ORDER BY v.distance",
        (vec, k * 4, scope),
    )
    out = []
    for doc_id, distance in rows:
        mem = store.query(
            "SELECT m.id, m.text, m.importance, m.created_at FROM docs d "
            "JOIN memories m ON d.kind = 'memory' AND d.ref_id = m.id "
            "WHERE d.id = ? AND m.superseded_by IS NULL",
            (doc_id,),
        )
        if mem:
            row = dict(zip(("id", "text", "importance", "created_at"), mem[0], strict=True))
            out.append((row, 1.0 - float(distance)))
    return out[:k]


def normalize_timestamp(value: str) -> str:
    """ISO 8601 text -> UTC ISO 8601 (naive times are taken as UTC); ValueError if invalid."""
    text = value.strip()
    if text.endswith(("Z", "z")):
        text = text[:-1] + "+00:00"
    when = dt.datetime.fromisoformat(text)
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.astimezone(dt.UTC).isoformat(timespec="milliseconds")


def newest(store: Store, scope: str | None, limit: int) -> list[dict[str, Any]]:
    """Newest memories first (all scopes when ``scope`` is None), as dicts (blocking)."""
    cols = (
        "id text importance source speaker scope session_id external_id created_at "
        "updated_at superseded_by"
    ).split()
    sql = f"SELECT {', '.join(cols)} FROM memories"
    params: list[Any] = []
    if scope is not None:
        sql += " WHERE scope = ?"
        params.append(scope)
    sql += " ORDER BY id DESC LIMIT ?"
    params.append(limit)
    return [dict(zip(cols, r, strict=True)) for r in store.query(sql, params)]
