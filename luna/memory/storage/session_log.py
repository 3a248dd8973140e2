"""The session log: append-only chat messages and the part of them after compaction.

Invariants:
- ``append_message`` commits the message (and its search-index row) in one transaction before
  it returns, so every message it has acknowledged survives ``kill -9`` of Luna (in WAL mode a
  commit is in the OS's hands when it returns; no fsync is needed for that).
- Power loss is what an fsync is for, and a turn pays for one on its path (one durable point at
  each end, not one per write). What each write is and how durable it is when it returns:
  - the user's message (also ``system``): handed over by a person, so a durable commit (fsync):
    it survives power loss before the turn does anything else;
  - the per-turn context (``set_context``), each assistant tool call and each tool result:
    intermediate rows the turn can do without (the prompt puts a placeholder in for a lost
    result); committed without fsync: they survive ``kill -9`` at once and power loss with the
    turn's closing sync;
  - the final reply (an assistant message without tool calls, :func:`ends_turn`): the user has
    already read it as it streamed; committed without fsync, then the ``Memory`` facade fsyncs
    the WAL in the background right away (its closing durable point, off the path to the next
    turn), and the next user message's durable commit covers it too.
- Messages are never rewritten. Compaction is a soft cut: the summary row records the last
  message it covers, and only ``prompt_history`` looks past it; the originals stay searchable.
- A message's attachments (``message["attachments"]``, ``Attachment.to_json`` dicts) are rows
  of ``message_attachments`` in the same transaction, and come back in order on its
  ``LoggedMessage``; its search text names each image, with its description once there is one.
- What was stored comes back as stored (``LoggedMessage``): turning it into a prompt (context,
  reasoning, tool-call/result pairing) is ``luna.agent.prompt``'s job, not the log's.
- Blocking functions; the ``Memory`` facade runs them in a worker thread.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from luna.errors import MemoryStoreError
from luna.memory.storage import db
from luna.memory.storage.store import Store, now_iso
from luna.messages import Attachment, LoggedMessage, Usage, clean_value

ROLES = ("system", "user", "assistant", "tool")


def _tool_calls_json(message: dict[str, Any]) -> str | None:
    calls = message.get("tool_calls")
    if not calls:
        return None
    wire = []
    for call in calls:
        to_wire = getattr(call, "to_wire", None)
        wire.append(to_wire() if callable(to_wire) else dict(call))
    return json.dumps(wire, ensure_ascii=False)


def is_handed_over(message: dict[str, Any]) -> bool:
    """A message a person handed over: committed durably (fsync) before it is acknowledged."""
    return message.get("role") in ("user", "system")


def ends_turn(message: dict[str, Any]) -> bool:
    """The turn's final reply: its commit is followed by a background sync of the log."""
    return message.get("role") == "assistant" and not message.get("tool_calls")


def append_message(
    store: Store,
    session_id: str,
    message: dict[str, Any],
    *,
    context: str | None = None,
    usage: Usage | None = None,
    scope: str = "owner",
    created: str | None = None,
) -> int:
    """Append one OpenAI-style message (durably if :func:`is_handed_over`); returns its id.

    ``created`` (UTC ISO 8601) is when it was given, for a message held while the database
    could not take it (:mod:`luna.memory.storage.held`); default now."""
    with store.transaction(durable=is_handed_over(message)) as conn:
        return insert_message(
            store, conn, session_id, message, context=context, usage=usage, scope=scope,
            created=created,
        )  # fmt: skip


def insert_message(
    store: Store,
    conn: Any,
    session_id: str,
    message: dict[str, Any],
    *,
    context: str | None = None,
    usage: Usage | None = None,
    scope: str = "owner",
    created: str | None = None,
) -> int:
    """:func:`append_message`'s rows, inside the caller's transaction ``conn``."""
    message = clean_value(message)  # undecodable input is stored visibly replaced, never lost
    role = message.get("role")
    if role not in ROLES:
        raise MemoryStoreError(f"cannot log a message with role {role!r}")
    content = message.get("content") or ""
    if not isinstance(content, str):  # multi-part content: keep the text parts
        content = "\n".join(
            p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text"
        )
    reasoning = message.get("reasoning_content") or None
    created = created or now_iso()
    conn.execute(
        "INSERT OR IGNORE INTO sessions (id, scope, created_at) VALUES (?, ?, ?)",
        (session_id, scope, created),
    )
    cur = conn.execute(
        """INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, name,
               context, scope, created_at, prompt_tokens, completion_tokens, total_tokens,
               cached_tokens, reasoning)
           VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
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
            reasoning if isinstance(reasoning, str) else None,
        ),
    )
    message_id = db.inserted_id(cur)
    attachments = [Attachment.from_json(a) for a in message.get("attachments") or []]
    conn.executemany(
        """INSERT INTO message_attachments
               (message_id, position, kind, mime, name, size, sha256)
           VALUES (?, ?, ?, ?, ?, ?, ?)""",
        [
            (message_id, i, a.kind, a.mime, a.name, a.size, a.sha256)
            for i, a in enumerate(attachments)
        ],
    )
    if role in ("user", "assistant", "tool") and attachments:
        text = searchable_text(content, attachments, descriptions(conn, attachments))
        store.index_doc(conn, "message", message_id, scope, created, text, thread=session_id)
    elif role in ("user", "assistant") and content.strip():
        store.index_doc(conn, "message", message_id, scope, created, content, thread=session_id)
    return message_id


def searchable_text(
    content: str, attachments: Sequence[Attachment], described: dict[str, str]
) -> str:
    """A message's text for search: its content, then one line per image (with what it
    shows, once described)."""
    lines = [content] if content.strip() else []
    for a in attachments:
        if a.kind == "image" and a.sha256 in described:
            lines.append(f"[image {a.name}: {described[a.sha256]}]")
        elif a.kind == "image":
            lines.append(f"[image {a.name}]")
    return "\n".join(lines)


def attachments_of(conn: Any, message_id: int) -> list[Attachment]:
    """A logged message's attachments, in order, inside the caller's transaction."""
    rows = conn.execute(
        "SELECT kind, mime, name, size, sha256 FROM message_attachments "
        "WHERE message_id = ? ORDER BY position",
        (message_id,),
    ).fetchall()
    return [Attachment(kind, mime, name, size, sha) for kind, mime, name, size, sha in rows]


def descriptions(conn: Any, attachments: Sequence[Attachment]) -> dict[str, str]:
    """sha256 -> description, for the attachments already described."""
    hashes = sorted({a.sha256 for a in attachments})
    if not hashes:
        return {}
    marks = ",".join("?" * len(hashes))
    rows = conn.execute(
        f"SELECT sha256, text FROM image_descriptions WHERE sha256 IN ({marks})", hashes
    ).fetchall()
    return {sha: text for sha, text in rows}


def set_context(store: Store, message_id: int, context: str) -> None:
    """Attach the per-turn context to a logged user message (once; the schema enforces it).

    Not fsynced: the turn's closing sync covers it (see the module docstring)."""
    with store.transaction(durable=False) as conn:
        conn.execute(
            "UPDATE messages SET context = ? WHERE id = ? AND role = 'user'", (context, message_id)
        )


_COLUMNS = "id, role, content, tool_calls, tool_call_id, name, context, reasoning"


def _record(row: tuple) -> LoggedMessage:
    mid, role, content, tool_calls, tool_call_id, name, context, reasoning = row
    return LoggedMessage(
        id=int(mid),
        role=role,
        content=content or "",
        tool_calls=json.loads(tool_calls) if tool_calls else None,
        tool_call_id=tool_call_id,
        name=name,
        context=context,
        reasoning=reasoning,
    )


def summary(store: Store, session_id: str) -> tuple[str | None, int]:
    """(cumulative summary or None, id of the last message it covers or 0)."""
    rows = store.query(
        "SELECT text, cut_message_id FROM summaries WHERE session_id = ?", (session_id,)
    )
    return (rows[0][0], int(rows[0][1])) if rows else (None, 0)


def backlog(store: Store, session_id: str) -> tuple[str | None, int, int]:
    """(summary or None, the id of the last message it covers or 0, how many messages follow
    it): what the librarian weighs after every turn, without reading the messages."""
    text, cut = summary(store, session_id)
    rows = store.query(
        "SELECT count(*) FROM messages WHERE session_id = ? AND id > ?", (session_id, cut)
    )
    return text, cut, int(rows[0][0])


def messages_after(store: Store, session_id: str, after_id: int) -> list[LoggedMessage]:
    """The session's messages with an id above ``after_id``, oldest first, as stored."""
    rows = store.query(
        f"SELECT {_COLUMNS} FROM messages WHERE session_id = ? AND id > ? ORDER BY id",
        (session_id, after_id),
    )
    files: dict[int, list[Attachment]] = {}
    for mid, kind, mime, name, size, sha in store.query(
        """SELECT a.message_id, a.kind, a.mime, a.name, a.size, a.sha256
           FROM message_attachments a JOIN messages m ON m.id = a.message_id
           WHERE m.session_id = ? AND m.id > ? ORDER BY a.message_id, a.position""",
        (session_id, after_id),
    ):
        data = {"kind": kind, "mime": mime, "name": name, "size": size, "sha256": sha}
        files.setdefault(int(mid), []).append(Attachment.from_json(data))
    return [
        dataclasses.replace(rec, attachments=tuple(files[rec.id])) if rec.id in files else rec
        for rec in map(_record, rows)
    ]


def prompt_history(store: Store, session_id: str) -> tuple[str | None, list[LoggedMessage]]:
    """(summary or None, the messages after the compaction cut)."""
    text, cut = summary(store, session_id)
    return text, messages_after(store, session_id, cut)


def has_message(store: Store, session_id: str, message_id: int) -> bool:
    """Whether the session still holds this message (it is gone once the session is
    forgotten)."""
    rows = store.query(
        "SELECT 1 FROM messages WHERE id = ? AND session_id = ?", (message_id, session_id)
    )
    return bool(rows)


def has_answered(store: Store, session_id: str) -> bool:
    """Whether Luna has spoken in the session: it holds an assistant message (none once the
    session is forgotten). One indexed lookup (``messages_session``)."""
    rows = store.query(
        "SELECT 1 FROM messages WHERE session_id = ? AND role = 'assistant' LIMIT 1",
        (session_id,),
    )
    return bool(rows)


def set_summary(store: Store, session_id: str, text: str, cut_message_id: int) -> None:
    """Store the session's cumulative summary and move its compaction cut (soft); refused
    when the cut's message is not the session's (it was forgotten meanwhile)."""
    now = now_iso()
    with store.transaction() as conn:
        scope_row = conn.execute("SELECT scope FROM sessions WHERE id = ?", (session_id,))
        row = scope_row.fetchone()
        if row is None:
            raise MemoryStoreError(f"unknown session {session_id!r}")
        if not conn.execute(
            "SELECT 1 FROM messages WHERE id = ? AND session_id = ?", (cut_message_id, session_id)
        ).fetchone():
            raise MemoryStoreError(
                f"session {session_id!r} has no message {cut_message_id} (forgotten meanwhile)"
            )
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
