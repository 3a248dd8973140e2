"""Read-only views of the memory database for people: the JSON the CLI and the web page show.

Job: the one place that turns what memory stores into the dicts ``luna memory … --json`` prints
and the web front-end serves (search hits with their provenance, memories with their
supersession chain, sessions and pages of a session's history), so both show the same thing.

Invariants:
- Read-only: nothing here writes, migrates or re-embeds.
- Every query runs in a worker thread (``asyncio.to_thread``), never on the event loop.
- Pages are bounded (``MAX_PAGE``); a 10,000-message session is read one page at a time, newest
  page first, each page oldest-first, paged by message id (stable while the log grows).
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from luna.memory.recall.search import RecallItem

if TYPE_CHECKING:
    from luna.memory import Memory
    from luna.memory.storage.store import Store

MAX_PAGE = 500
TITLE_CHARS = 80

MEMORY_COLUMNS = (
    "id",
    "text",
    "importance",
    "source",
    "speaker",
    "scope",
    "session_id",
    "external_id",
    "created_at",
    "updated_at",
    "superseded_by",
)


def recall_json(item: RecallItem) -> dict[str, Any]:
    """One search hit as the CLI's ``--json`` and the web API give it, with its provenance."""
    return {
        "id": item.external_id if item.external_id is not None else item.id,
        "ref_id": item.id,
        "kind": item.kind,
        "score": item.score,
        "text": item.text,
        "created_at": item.created_at,
        "source": item.source,
        "session_id": item.session_id,
        "importance": item.importance,
        "superseded_by": item.superseded_by,
    }


def _bounded(limit: int) -> int:
    return max(1, min(int(limit), MAX_PAGE))


def _memory_rows(store: Store, where: str, params: tuple) -> list[dict[str, Any]]:
    rows = store.query(f"SELECT {', '.join(MEMORY_COLUMNS)} FROM memories {where}", params)
    return [dict(zip(MEMORY_COLUMNS, r, strict=True)) for r in rows]


def _memory_detail(store: Store, memory_id: int) -> dict[str, Any] | None:
    found = _memory_rows(store, "WHERE id = ?", (memory_id,))
    if not found:
        return None
    row = found[0]
    # Supersession: the chain of newer versions, and the older ones this one replaced.
    newer: list[dict[str, Any]] = []
    seen = {memory_id}
    nxt = row["superseded_by"]
    while nxt is not None and nxt not in seen and len(newer) < 50:
        seen.add(nxt)
        step = _memory_rows(store, "WHERE id = ?", (nxt,))
        if not step:
            break
        newer.append(step[0])
        nxt = step[0]["superseded_by"]
    older = _memory_rows(store, "WHERE superseded_by = ? ORDER BY id", (memory_id,))
    return {**row, "superseded_chain": newer, "supersedes": older}


async def memory_detail(memory: Memory, memory_id: int) -> dict[str, Any] | None:
    """A memory with its provenance, what replaced it (newest last) and what it replaced."""
    return await asyncio.to_thread(_memory_detail, memory.store, memory_id)


# How each part of Luna names its sessions (repl.py, web/turns.py and web/reconcile.py,
# discord/bot.py, telegram/ and matrix/conversation.py, scheduler/execute.py, config/hooks.py):
# the log keeps no front-end per session, the id says it.
FRONTEND_PREFIXES = (
    ("repl-", "repl"),
    ("web-", "web"),
    ("api:", "api"),
    ("ch-", "discord"),
    ("tg-", "telegram"),
    ("mx-", "matrix"),
    ("task-", "scheduler"),
    ("heartbeat", "scheduler"),
    ("hook-", "hook"),
)


def frontend_of(session_id: str) -> str:
    """The part of Luna a session came from, as its id says ("?" when it says nothing)."""
    for prefix, name in FRONTEND_PREFIXES:
        if session_id.startswith(prefix):
            return name
    return "?"


def _list_sessions(store: Store, limit: int) -> list[dict[str, Any]]:
    rows = store.query(
        """SELECT s.id, s.scope, s.created_at,
                  (SELECT count(*) FROM messages m WHERE m.session_id = s.id),
                  (SELECT max(m.id) FROM messages m WHERE m.session_id = s.id),
                  (SELECT m.created_at FROM messages m WHERE m.session_id = s.id
                     ORDER BY m.id DESC LIMIT 1),
                  (SELECT m.content FROM messages m WHERE m.session_id = s.id
                     AND m.role = 'user' ORDER BY m.id LIMIT 1),
                  (SELECT count(DISTINCT a.sha256) FROM message_attachments a
                     JOIN messages m ON m.id = a.message_id WHERE m.session_id = s.id)
           FROM sessions s ORDER BY 5 DESC NULLS LAST, s.created_at DESC LIMIT ?""",
        (limit,),
    )
    out = []
    for sid, scope, created, count, _last_id, last_at, first, files in rows:
        title = " ".join(str(first or "").split())
        out.append(
            {
                "id": sid,
                "frontend": frontend_of(sid),
                "scope": scope,
                "created_at": created,
                "messages": int(count),
                "files": int(files),
                "last_at": last_at,
                "title": title[:TITLE_CHARS] + ("…" if len(title) > TITLE_CHARS else ""),
            }
        )
    return out


async def list_sessions(memory: Memory, limit: int = 100) -> list[dict[str, Any]]:
    """Sessions, most recently active first, each with its front-end, its counts of messages
    and files, and its first user line."""
    return await asyncio.to_thread(_list_sessions, memory.store, _bounded(limit))


def _message_json(row: tuple) -> dict[str, Any]:
    mid, role, content, tool_calls, tool_call_id, name, created = row
    return {
        "id": int(mid),
        "role": role,
        "content": content or "",
        "tool_calls": json.loads(tool_calls) if tool_calls else None,
        "tool_call_id": tool_call_id,
        "name": name,
        "created_at": created,
    }


def _history_page(
    store: Store, session_id: str, before_id: int | None, limit: int
) -> dict[str, Any]:
    before = before_id if before_id is not None else 2**63 - 1
    rows = store.query(
        """SELECT id, role, content, tool_calls, tool_call_id, name, created_at FROM messages
           WHERE session_id = ? AND id < ? ORDER BY id DESC LIMIT ?""",
        (session_id, before, limit + 1),
    )
    has_more = len(rows) > limit
    page = [_message_json(r) for r in reversed(rows[:limit])]
    if page:  # each message's files, by name (the page shows them under the message)
        files = store.query(
            """SELECT message_id, name, kind, size FROM message_attachments
               WHERE message_id BETWEEN ? AND ? ORDER BY message_id, position""",
            (page[0]["id"], page[-1]["id"]),
        )
        by_id: dict[int, list[dict[str, Any]]] = {}
        for mid, name, kind, size in files:
            by_id.setdefault(mid, []).append({"name": name, "kind": kind, "size": size})
        for m in page:
            if m["id"] in by_id:
                m["files"] = by_id[m["id"]]
    return {"session_id": session_id, "messages": page, "has_more": has_more}


async def history_page(
    memory: Memory, session_id: str, *, before_id: int | None = None, limit: int = 100
) -> dict[str, Any]:
    """The ``limit`` messages before ``before_id`` (default: the newest), oldest first, with
    ``has_more`` telling whether older ones remain. Tool calls and results are included."""
    return await asyncio.to_thread(
        _history_page, memory.store, session_id, before_id, _bounded(limit)
    )


def _conversation_tail(store: Store, session_id: str, limit: int) -> list[tuple[str, str]]:
    rows = store.query(
        """SELECT role, content FROM messages WHERE session_id = ?
             AND (role = 'user' OR (role = 'assistant' AND tool_calls IS NULL))
           ORDER BY id DESC LIMIT ?""",
        (session_id, limit),
    )
    return [(role, content or "") for role, content in reversed(rows)]


async def conversation_tail(memory: Memory, session_id: str, limit: int) -> list[tuple[str, str]]:
    """The last ``limit`` messages a person saw in the session, oldest first, as (role, text):
    user messages and the assistant's final replies (not its tool-calling steps)."""
    return await asyncio.to_thread(_conversation_tail, memory.store, session_id, _bounded(limit))
