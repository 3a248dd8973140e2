"""The session log: append-only chat messages and the prompt view after compaction.

Invariants:
- ``append_message`` commits the message (and its search-index row) in one transaction with
  ``synchronous=FULL`` before it returns: an acknowledged message survives ``kill -9``.
- Messages are never rewritten. Compaction is a soft cut: the summary row records the last
  message it covers, and only ``prompt_history`` looks past it; the originals stay searchable.
- ``prompt_history`` never splits an assistant ``tool_calls`` message from its tool results: a
  cut that would is moved back to the assistant message, and a call whose result was never
  logged (the process died mid-tool) gets a placeholder result so the model accepts the history.
- Blocking functions; the ``Memory`` facade runs them in a worker thread.
"""

from __future__ import annotations

import json
from typing import Any

from luna.errors import MemoryStoreError
from luna.memory.store import Store, now_iso
from luna.messages import Usage

ROLES = ("system", "user", "assistant", "tool")
INTERRUPTED_RESULT = "(no result was recorded: the tool run was interrupted)"


def _tool_calls_json(message: dict[str, Any]) -> str | None:
    calls = message.get("tool_calls")
    if not calls:
        return None
    wire = []
    for call in calls:
        to_wire = getattr(call, "to_wire", None)
        wire.append(to_wire() if callable(to_wire) else dict(call))
    return json.dumps(wire, ensure_ascii=False)


def append_message(
    store: Store,
    session_id: str,
    message: dict[str, Any],
    *,
    context: str | None = None,
    usage: Usage | None = None,
    scope: str = "owner",
) -> int:
    """Durably append one OpenAI-style message; returns its id."""
    role = message.get("role")
    if role not in ROLES:
        raise MemoryStoreError(f"cannot log a message with role {role!r}")
    content = message.get("content") or ""
    if not isinstance(content, str):  # multi-part content: keep the text parts
        content = "\n".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    created = now_iso()
    with store.transaction() as conn:
        conn.execute(
            "INSERT OR IGNORE INTO sessions (id, scope, created_at) VALUES (?, ?, ?)",
            (session_id, scope, created),
        )
        cur = conn.execute(
            """INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, name,
                   context, scope, created_at, prompt_tokens, completion_tokens, total_tokens,
                   cached_tokens)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            (
                session_id,
                role,
                content,
                _tool_calls_json(message),
                message.get("tool_call_id"),
                message.get("name"),
                context,
                scope,
                created,
                usage.prompt_tokens if usage else None,
                usage.completion_tokens if usage else None,
                usage.total_tokens if usage else None,
                usage.cached_tokens if usage else None,
            ),
        )
        message_id = int(cur.lastrowid)
        if role in ("user", "assistant") and content.strip():
            store.index_doc(conn, "message", message_id, scope, created, content, thread=session_id)
    return message_id


def set_context(store: Store, message_id: int, context: str) -> None:
    """Attach the per-turn context to a logged user message (once; the schema enforces it)."""
    with store.transaction() as conn:
        conn.execute(
            "UPDATE messages SET context = ? WHERE id = ? AND role = 'user'", (context, message_id)
        )


def _to_openai(row: tuple) -> dict[str, Any]:
    _id, role, content, tool_calls, tool_call_id, name, context = row
    msg: dict[str, Any] = {"role": role, "content": content or ""}
    if role == "user" and context:
        msg["content"] = f"{msg['content']}\n\n{context}"
    if tool_calls:
        msg["tool_calls"] = json.loads(tool_calls)
    if role == "tool":
        msg["tool_call_id"] = tool_call_id or ""
        if name:
            msg["name"] = name
    return msg


_COLUMNS = "id, role, content, tool_calls, tool_call_id, name, context"


def summary(store: Store, session_id: str) -> tuple[str | None, int]:
    """(cumulative summary or None, id of the last message it covers or 0)."""
    rows = store.query(
        "SELECT text, cut_message_id FROM summaries WHERE session_id = ?", (session_id,)
    )
    return (rows[0][0], int(rows[0][1])) if rows else (None, 0)


def safe_cut(rows: list[tuple], cut: int) -> int:
    """Move a cut (last id hidden) back so no tool result is separated from its call.

    ``rows`` are the session's messages (``_COLUMNS`` order), oldest first.
    """
    call_owner: dict[str, int] = {}
    for row in rows:
        if row[3]:
            for call in json.loads(row[3]):
                call_owner[str(call.get("id", ""))] = row[0]
    for row in rows:
        if row[0] > cut and row[1] == "tool":
            owner = call_owner.get(str(row[4] or ""))
            if owner is not None and owner <= cut:
                cut = owner - 1
    return cut


def messages_after(store: Store, session_id: str, after_id: int) -> list[tuple]:
    return store.query(
        f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND id > ? ORDER BY id",
        (session_id, after_id),
    )


def prompt_history(store: Store, session_id: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(summary or None, the messages after the compaction cut as OpenAI dicts)."""
    text, cut = summary(store, session_id)
    rows = messages_after(store, session_id, 0) if cut else None
    if rows is not None:
        cut = safe_cut(rows, cut)
        rows = [r for r in rows if r[0] > cut]
    else:
        rows = messages_after(store, session_id, 0)
    calls_in_view: set[str] = set()
    out: list[dict[str, Any]] = []
    for row in rows:
        msg = _to_openai(row)
        if row[1] == "tool" and str(row[4] or "") not in calls_in_view:
            continue  # an orphan result with no call in view: the model would reject it
        calls_in_view.update(str(c.get("id", "")) for c in msg.get("tool_calls") or [])
        out.append(msg)
    answered = {str(m.get("tool_call_id")) for m in out if m["role"] == "tool"}
    return text, _fill_missing_results(out, answered)


def _fill_missing_results(msgs: list[dict[str, Any]], answered: set[str]) -> list[dict[str, Any]]:
    """Give every unanswered tool call a placeholder result right after its batch."""
    out: list[dict[str, Any]] = []
    pending: list[str] = []
    for msg in msgs:
        if pending and msg["role"] != "tool":
            out.extend(
                {"role": "tool", "tool_call_id": c, "content": INTERRUPTED_RESULT} for c in pending
            )
            pending = []
        out.append(msg)
        if msg["role"] == "assistant":
            pending = [
                str(c.get("id", ""))
                for c in msg.get("tool_calls") or []
                if str(c.get("id", "")) not in answered
            ]
    out.extend({"role": "tool", "tool_call_id": c, "content": INTERRUPTED_RESULT} for c in pending)
    return out


def set_summary(store: Store, session_id: str, text: str, cut_message_id: int) -> None:
    """Store the session's cumulative summary and move its compaction cut (soft)."""
    now = now_iso()
    with store.transaction() as conn:
        scope_row = conn.execute("SELECT scope FROM sessions WHERE id = ?", (session_id,))
        row = scope_row.fetchone()
        if row is None:
            raise MemoryStoreError(f"unknown session {session_id!r}")
        conn.execute(
            """INSERT INTO summaries (session_id, text, cut_message_id, created_at, updated_at)
               VALUES (?, ?, ?, ?, ?)
               ON CONFLICT (session_id) DO UPDATE SET text = excluded.text,
                   cut_message_id = excluded.cut_message_id,
                   compactions = compactions + 1, updated_at = excluded.updated_at""",
            (session_id, text, cut_message_id, now, now),
        )
        sid = conn.execute(
            "SELECT id FROM summaries WHERE session_id = ?", (session_id,)
        ).fetchone()[0]
        store.index_doc(conn, "summary", int(sid), row[0], now, text)
