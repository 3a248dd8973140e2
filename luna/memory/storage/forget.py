"""Forgetting a session: its messages and everything derived from them, in one transaction.

What goes: the session's messages and their attachment rows, their ``docs``/FTS/vector rows,
its summary (the compactions) and the summary's index rows, its kept heads, the memories the
librarian (or ``/remember``) stored with its id unless they are kept, and the description of
each image that no other message carries any more. What stays: everything of every other
session, the scheduler's tasks and runs and the webhook events (each has its own commands, and
its own record of what ran), and the files themselves (:mod:`luna.memory.sessions` removes the
ones this returns, after the commit: the attachments no message carries any more, and the
saved large outputs under ``outputs`` that its messages named and no other message names).

Invariants:
- One durable transaction: after a crash the session is there whole or gone whole.
- ``messages`` stays append-only for every other session: the delete trigger lets a message
  go only while its session's id is in ``forgetting``, a row that lives inside this
  transaction alone (migration ``m015_forget_sessions``).
- Refused (SessionInUseError) while a chat app's turn of the session is acknowledged but not
  answered (``channel_turns`` with no ``answered_at``; its answered turns' rows go with it),
  and, when ``turn_may_run``, while its last turn is open (the
  last message a user's, a tool's or a tool call) and younger than ``turn_timeout``: a turn
  of another process may still be writing to it.
- A memory superseded by a forgotten one is live again (``superseded_by`` is set NULL by the
  foreign key): what replaced it is gone.
- Blocking; the caller runs it in a worker thread.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

from luna.errors import NoSuchSessionError, SessionInUseError
from luna.memory.storage import db
from luna.memory.storage.store import Store


@dataclass(frozen=True)
class Footprint:
    """What forgetting a session would remove (for the question asked before)."""

    session_id: str
    messages: int
    memories: int
    files: int  # distinct attachments its messages carry
    first_at: str | None
    last_at: str | None
    tasks: int = 0  # scheduled tasks made in it that are still active (they are kept)


@dataclass(frozen=True)
class Forgotten:
    """What a forget removed; ``unused`` are the files no message refers to any more, each
    with the time of the last forgotten message that carried it."""

    session_id: str
    messages: int
    memories: int
    summaries: int
    docs: int
    descriptions: int
    shared: int  # files the session carried that other messages still carry
    unused: dict[str, str] = field(default_factory=dict)
    unused_outputs: dict[str, str] = field(default_factory=dict)  # saved-output file names


def footprint(store: Store, session_id: str) -> Footprint | None:
    """What the session holds, or None when no message, summary or memory has its id."""
    rows = store.query(
        """SELECT (SELECT count(*) FROM messages WHERE session_id = :s),
                  (SELECT count(*) FROM memories WHERE session_id = :s),
                  (SELECT count(DISTINCT a.sha256) FROM message_attachments a
                     JOIN messages m ON m.id = a.message_id WHERE m.session_id = :s),
                  (SELECT min(created_at) FROM messages WHERE session_id = :s),
                  (SELECT max(created_at) FROM messages WHERE session_id = :s),
                  EXISTS (SELECT 1 FROM sessions WHERE id = :s),
                  (SELECT count(*) FROM scheduled_tasks WHERE origin_session = :s
                     AND state IN ('active', 'running'))""",
        {"s": session_id},
    )
    messages, memories, files, first, last, exists, tasks = rows[0]
    if not (exists or messages or memories):
        return None
    return Footprint(session_id, int(messages), int(memories), int(files), first, last, int(tasks))


def forget_session(
    store: Store,
    session_id: str,
    *,
    keep_memories: bool = False,
    turn_may_run: bool = False,
    turn_timeout: float = 1800.0,
    outputs: str | None = None,
) -> Forgotten:
    """Delete the session and what derives from it (module docstring); NoSuchSessionError
    when nothing has its id, SessionInUseError when it is in use. ``outputs``: the folder
    (as its messages write it) where large tool outputs and documents' text are saved."""
    with store.transaction(durable=True) as conn:
        exists = conn.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone()
        memory_ids = [
            int(r[0])
            for r in conn.execute("SELECT id FROM memories WHERE session_id = ?", (session_id,))
        ]
        if exists is None and not memory_ids:
            raise NoSuchSessionError(f"no session {session_id!r} (see `luna sessions list`)")
        _check_idle(conn, session_id, turn_may_run, turn_timeout)
        conn.execute("INSERT INTO forgetting (session_id) VALUES (?)", (session_id,))
        docs = _unindex(
            store,
            conn,
            """SELECT d.id FROM docs d JOIN messages m ON d.kind = 'message' AND d.ref_id = m.id
               WHERE m.session_id = ?""",
            session_id,
        )
        docs += _unindex(
            store,
            conn,
            """SELECT d.id FROM docs d JOIN summaries s ON d.kind = 'summary' AND d.ref_id = s.id
               WHERE s.session_id = ?""",
            session_id,
        )
        summaries = conn.execute("DELETE FROM summaries WHERE session_id = ?", (session_id,))
        memories = 0
        if not keep_memories and memory_ids:
            docs += _unindex(
                store,
                conn,
                """SELECT d.id FROM docs d JOIN memories m ON d.kind = 'memory' AND d.ref_id = m.id
                   WHERE m.session_id = ?""",
                session_id,
            )
            memories = conn.execute(
                "DELETE FROM memories WHERE session_id = ?", (session_id,)
            ).rowcount
        carried = dict(
            conn.execute(
                """SELECT a.sha256, max(m.created_at) FROM message_attachments a
                   JOIN messages m ON m.id = a.message_id WHERE m.session_id = ?
                   GROUP BY a.sha256""",
                (session_id,),
            ).fetchall()
        )
        named = _outputs_named(conn, session_id, outputs) if outputs else {}
        conn.execute(
            """DELETE FROM message_attachments
               WHERE message_id IN (SELECT id FROM messages WHERE session_id = ?)""",
            (session_id,),
        )
        conn.execute(
            """DELETE FROM channel_turns
               WHERE message_id IN (SELECT id FROM messages WHERE session_id = ?)""",
            (session_id,),
        )
        messages = conn.execute("DELETE FROM messages WHERE session_id = ?", (session_id,)).rowcount
        conn.execute("DELETE FROM session_heads WHERE session_id = ?", (session_id,))
        conn.execute("DELETE FROM sessions WHERE id = ?", (session_id,))
        unused: dict[str, str] = {}
        descriptions = 0
        for sha, last in carried.items():
            if conn.execute(
                "SELECT 1 FROM message_attachments WHERE sha256 = ? LIMIT 1", (sha,)
            ).fetchone():
                continue
            unused[str(sha)] = str(last)
            descriptions += conn.execute(
                "DELETE FROM image_descriptions WHERE sha256 = ?", (sha,)
            ).rowcount
        unused_outputs = {
            name: last
            for name, last in named.items()
            if not conn.execute(
                "SELECT 1 FROM messages WHERE instr(content, ?) > 0 LIMIT 1",
                (f"{outputs}/{name}",),
            ).fetchone()
        }
        conn.execute("DELETE FROM forgetting WHERE session_id = ?", (session_id,))
    store.drop_caches()
    return Forgotten(
        session_id,
        messages=messages,
        memories=memories,
        summaries=summaries.rowcount,
        docs=docs,
        descriptions=descriptions,
        shared=len(carried) - len(unused),
        unused=unused,
        unused_outputs=unused_outputs,
    )


def _outputs_named(conn: db.Connection, session_id: str, outputs: str) -> dict[str, str]:
    """The files directly under ``outputs`` the session's messages name: name -> the time of
    the last message naming it."""
    pattern = re.compile(re.escape(outputs + "/") + r"([^\s/\[\];,'\"]+)")
    named: dict[str, str] = {}
    for content, created in conn.execute(
        "SELECT content, created_at FROM messages WHERE session_id = ? AND instr(content, ?) > 0",
        (session_id, outputs + "/"),
    ):
        for name in pattern.findall(content):
            named[name] = max(named.get(name, ""), str(created))
    return named


def _unindex(store: Store, conn: db.Connection, sql: str, session_id: str) -> int:
    ids = [int(r[0]) for r in conn.execute(sql, (session_id,)).fetchall()]
    for doc_id in ids:
        store.unindex_doc(conn, doc_id)
    return len(ids)


def _check_idle(
    conn: db.Connection, session_id: str, turn_may_run: bool, turn_timeout: float
) -> None:
    waiting = conn.execute(
        """SELECT count(*) FROM channel_turns WHERE answered_at IS NULL
           AND message_id IN (SELECT id FROM messages WHERE session_id = ?)""",
        (session_id,),
    ).fetchone()[0]
    if waiting:
        raise SessionInUseError(
            f"session {session_id!r} has a chat message Luna took in but has not answered yet; "
            "forget it once Luna has answered"
        )
    if not turn_may_run:
        return
    last = conn.execute(
        "SELECT role, tool_calls, created_at FROM messages WHERE session_id = ? "
        "ORDER BY id DESC LIMIT 1",
        (session_id,),
    ).fetchone()
    if last is None or not is_open_turn(last[0], last[1]):
        return
    when = dt.datetime.fromisoformat(last[2])
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    age = dt.datetime.now(dt.UTC) - when
    if age.total_seconds() < turn_timeout:
        raise SessionInUseError(
            f"session {session_id!r} has a turn running in the Luna that runs on this data "
            "folder; forget it once that turn has answered, or from that Luna itself "
            "(/forget-session in its terminal, DELETE /api/sessions/ID on its web API)"
        )


def is_open_turn(role: str, tool_calls: str | None) -> bool:
    """Whether a session whose last message is this one is in the middle of a turn: the
    user's message, a tool call or a tool's result waits for what comes next."""
    return role in ("user", "tool") or (role == "assistant" and bool(tool_calls))
