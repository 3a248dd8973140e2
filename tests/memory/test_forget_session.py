"""Forgetting a session: its rows go in one transaction, its files after, shared files stay.

A real SQLite file and data folder, the real embedding model (vectors are derived rows too),
the real attachment store and request log.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import time
from pathlib import Path

import pytest

from luna.attachments.store import AttachmentStore, attachments_dir
from luna.errors import MemoryStoreError, NoSuchSessionError, SessionInUseError
from luna.memory import Memory, sessions
from luna.memory.sessions import footprint, forget_session, sweep
from luna.memory.storage import db
from luna.memory.storage.request_log import RequestLog
from luna.messages import Attachment

SECRET = "my locker code at the swimming pool is 7-3-9-1"
KEPT = "the bakery on Elm Street sells rye bread on Fridays"


def _image(store: AttachmentStore, data: bytes, name: str) -> Attachment:
    sha = store.write(data)
    return Attachment("image", "image/png", name, len(data), sha)


def _files(memory: Memory) -> AttachmentStore:
    return AttachmentStore(attachments_dir(memory.cfg.db_path.parent))


async def _two_sessions(memory: Memory) -> tuple[Attachment, Attachment]:
    """Session "gone" (a secret, its own image, a shared one, a summary, a learned memory)
    beside session "stays" (the shared image, its own memory)."""
    files = _files(memory)
    own, shared = _image(files, b"own-png", "locker.png"), _image(files, b"shared", "map.png")
    await memory.append_message(
        "gone",
        {"role": "user", "content": SECRET, "attachments": [own.to_json(), shared.to_json()]},
    )
    reply = await memory.append_message("gone", {"role": "assistant", "content": "Noted."})
    await memory.set_summary("gone", "The user keeps a locker code.", reply)
    await memory.describe_image(own.sha256, "a locker with a padlock", "m")
    await memory.describe_image(shared.sha256, "a town map", "m")
    await memory.add_memory("locker code 7-3-9-1", session_id="gone", importance=8)
    await memory.append_message(
        "stays", {"role": "user", "content": KEPT, "attachments": [shared.to_json()]}
    )
    await memory.append_message("stays", {"role": "assistant", "content": "Good to know."})
    await memory.add_memory("bakery sells rye on Fridays", session_id="stays")
    await memory.add_memory("the user likes rye bread")  # tied to no session
    await memory.flush_index()
    log = RequestLog.beside(memory.cfg.db_path)
    for sid in ("gone", "stays"):
        said = [{"role": "system", "content": "be kind"}, {"role": "user", "content": sid}]
        body = {"messages": said}
        log.record(sid, None, body, {"content": "ok"})
    log.close()
    return own, shared


def _count(memory: Memory, sql: str, *args: object) -> int:
    return int(memory.store.query(sql, args)[0][0])


async def test_forget_session_removes_its_rows_and_files_and_keeps_the_rest(
    memory: Memory,
) -> None:
    own, shared = await _two_sessions(memory)
    assert any(SECRET in hit.text for hit in await memory.recall("locker code swimming pool"))
    seen = await footprint(memory, "gone")
    assert seen is not None and (seen.messages, seen.memories, seen.files) == (2, 1, 2)

    outcome = await forget_session(memory, "gone")

    rows = outcome.rows
    assert (rows.messages, rows.memories, rows.summaries, rows.descriptions) == (2, 1, 1, 1)
    assert (outcome.files_removed, outcome.files_kept, outcome.requests) == (1, 1, 1)
    for sql in (
        "SELECT count(*) FROM messages WHERE session_id = 'gone'",
        "SELECT count(*) FROM sessions WHERE id = 'gone'",
        "SELECT count(*) FROM summaries WHERE session_id = 'gone'",
        "SELECT count(*) FROM session_heads WHERE session_id = 'gone'",
        "SELECT count(*) FROM memories WHERE session_id = 'gone'",
        "SELECT count(*) FROM docs WHERE thread = 'gone'",
        "SELECT count(*) FROM docs_fts WHERE docs_fts MATCH 'locker'",
        "SELECT count(*) FROM docs_vec WHERE rowid NOT IN (SELECT id FROM docs)",
        "SELECT count(*) FROM doc_raw_vec WHERE doc_id NOT IN (SELECT id FROM docs)",
        "SELECT count(*) FROM forgetting",
    ):
        assert _count(memory, sql) == 0, sql
    assert _count(memory, "SELECT count(*) FROM docs") == _count(
        memory, "SELECT count(*) FROM docs_fts"
    )
    # the other session, its memory, the memory of no session and the shared file stay
    assert _count(memory, "SELECT count(*) FROM messages WHERE session_id = 'stays'") == 2
    assert {m["text"] for m in await memory.list_memories()} == {
        "bakery sells rye on Fridays",
        "the user likes rye bread",
    }
    files = _files(memory)
    assert not files.has(own.sha256) and files.read(shared.sha256) == b"shared"
    assert await memory.image_descriptions([own.sha256, shared.sha256]) == {
        shared.sha256: "a town map"
    }
    # recall (FTS and vectors) no longer finds it; the other session is still found
    hits = await memory.recall("locker code swimming pool padlock")
    assert not [h for h in hits if "7-3-9-1" in h.text or "locker" in h.text]
    assert any(KEPT in h.text for h in await memory.recall("bakery rye bread Elm Street"))
    # the request log kept the other session's request, whole, and dropped the parts only
    # the forgotten one used
    log = RequestLog.beside(memory.cfg.db_path)
    assert [r["session_id"] for r in log.sessions()] == ["stays"]
    (kept,) = log.for_session("stays")
    assert kept.messages[1] == {"role": "user", "content": "stays"}
    log.close()
    conn = sqlite3.connect(log.path)
    assert not [b for (b,) in conn.execute("SELECT body FROM parts") if '"gone"' in b]
    conn.close()
    with pytest.raises(NoSuchSessionError):
        await forget_session(memory, "gone")


async def test_forget_session_keeps_the_log_append_only_for_every_other_session(
    memory: Memory,
) -> None:
    await memory.append_message("a", {"role": "user", "content": "hello"})
    with pytest.raises(db.sqlite3.IntegrityError, match="append-only"):
        with memory.store.transaction() as conn:
            conn.execute("DELETE FROM messages WHERE session_id = 'a'")
    assert _count(memory, "SELECT count(*) FROM messages") == 1


async def test_forget_session_revives_what_its_memories_superseded(memory: Memory) -> None:
    old = await memory.add_memory("the user lives in Paris", session_id="before")
    new = await memory.add_memory("the user moved to Berlin", session_id="later")
    await memory.supersede(old, new)
    await forget_session(memory, "later")
    (row,) = await memory.list_memories()
    assert (row["id"], row["superseded_by"]) == (old, None)


async def test_forget_session_keep_memories_leaves_them(memory: Memory) -> None:
    await memory.append_message("s", {"role": "user", "content": "remember my bike is blue"})
    await memory.add_memory("the user's bike is blue", session_id="s")
    outcome = await forget_session(memory, "s", keep_memories=True)
    assert (outcome.rows.messages, outcome.rows.memories) == (1, 0)
    assert [m["text"] for m in await memory.list_memories()] == ["the user's bike is blue"]


async def test_forget_session_refuses_while_a_turn_of_another_process_runs(
    memory: Memory,
) -> None:
    await memory.append_message("live", {"role": "user", "content": "what is the weather?"})
    with pytest.raises(SessionInUseError, match="turn running"):
        await forget_session(memory, "live", turn_may_run=True)
    # with no other Luna, or once the turn is older than the turn timeout, it goes
    await forget_session(memory, "live", turn_may_run=True, turn_timeout=0.0)
    assert _count(memory, "SELECT count(*) FROM messages") == 0


async def test_forget_session_refuses_a_chat_turn_not_answered_and_held_messages(
    memory: Memory,
) -> None:
    mid = await memory.append_message("tg-1", {"role": "user", "content": "hi"})
    with memory.store.transaction() as conn:
        conn.execute(
            "INSERT INTO channel_turns (channel, account, event_id, message_id, event, "
            "created_at) VALUES ('telegram', 'bot', 'e1', ?, '{}', '2026-01-01')",
            (mid,),
        )
    with pytest.raises(SessionInUseError, match="not answered"):
        await forget_session(memory, "tg-1")
    assert _count(memory, "SELECT count(*) FROM messages") == 1
    with memory.store.transaction() as conn:  # answered (ChannelLedger.answered), kept a while
        conn.execute("UPDATE channel_turns SET answered_at = '2026-01-01'")
    await forget_session(memory, "tg-1")  # the session may go, its turn's row with it
    assert _count(memory, "SELECT count(*) FROM channel_turns") == 0
    later = {"role": "user", "content": "later"}
    memory.writes.held.hold("held-1", later, context=None, scope="owner")
    with pytest.raises(SessionInUseError, match="waiting to be written"):
        await forget_session(memory, "held-1")


async def test_forget_session_leaves_a_file_taken_in_again_to_the_sweep(memory: Memory) -> None:
    files = _files(memory)
    photo = _image(files, b"photo", "p.png")
    message = {"role": "user", "content": "", "attachments": [photo.to_json()]}
    await memory.append_message("s", message)
    await asyncio.sleep(0.01)
    files.write(b"photo")  # another message is on its way in with the same bytes
    outcome = await forget_session(memory, "s")
    assert (outcome.files_removed, outcome.files_kept) == (0, 1)
    assert files.has(photo.sha256)
    assert await sweep(memory) == (0, 1)  # no message refers to it, but it is new
    past = time.time() - 2 * 86_400
    os.utime(files.path(photo.sha256), (past, past))
    assert await sweep(memory) == (1, 0)
    assert not files.has(photo.sha256)


async def test_sweep_keeps_files_of_held_messages(memory: Memory) -> None:
    files = _files(memory)
    photo = _image(files, b"held photo", "h.png")
    past = time.time() - 2 * 86_400
    os.utime(files.path(photo.sha256), (past, past))
    message = {"role": "user", "content": "", "attachments": [photo.to_json()]}
    memory.writes.held.hold("h", message, context=None, scope="owner")
    assert await sweep(memory) == (0, 0)
    assert files.has(photo.sha256)


async def test_background_writes_of_a_forgotten_session_are_dropped(memory: Memory) -> None:
    """The librarian and the image describer may finish after the forget: they store nothing."""
    photo = _image(_files(memory), b"late photo", "late.png")
    message = {"role": "user", "content": "look", "attachments": [photo.to_json()]}
    cut = await memory.append_message("s", message)
    await memory.append_message("t", {"role": "user", "content": "another session"})
    await forget_session(memory, "s")
    await memory.describe_image(photo.sha256, "a late description", "m")
    assert await memory.image_descriptions([photo.sha256]) == {}
    await memory.append_message("s", {"role": "user", "content": "a fresh start"})
    with pytest.raises(MemoryStoreError, match="forgotten meanwhile"):
        await memory.set_summary("s", "what the forgotten part said", cut)
    assert await memory.summary("s") == (None, 0)


async def test_forget_session_keeps_the_scheduled_tasks_made_in_it(memory: Memory) -> None:
    """A reminder set in a conversation is the user's own record, with its own commands: it
    is named before the forget and keeps running after it."""
    await memory.append_message("s", {"role": "user", "content": "remind me at 8 to call Bo"})
    with memory.store.transaction() as conn:
        conn.execute(
            """INSERT INTO scheduled_tasks (kind, text, schedule_kind, spec, timezone, state,
                   creator, scope, frontend, origin_session, created_at, updated_at)
               VALUES ('reminder', 'call Bo', 'once', 'x', 'UTC', 'active', 'owner', 'owner',
                   'repl', 's', '2026-01-01', '2026-01-01')"""
        )
    seen = await footprint(memory, "s")
    assert seen is not None and seen.tasks == 1
    assert sessions.footprint_text(seen).endswith(
        "(1 scheduled task made in it will go on: `luna schedule list`)"
    )
    await forget_session(memory, "s")
    assert _count(memory, "SELECT count(*) FROM scheduled_tasks WHERE state = 'active'") == 1


async def test_forget_session_removes_the_saved_outputs_only_it_named(
    memory: Memory, tmp_path: Path
) -> None:
    """A large tool result or a document's text is saved under tools.outputs_dir and named in
    the message: it goes with the session unless another message names it too."""
    outputs = tmp_path / "tool_outputs"
    outputs.mkdir()
    own, shared = outputs / "read_file-0123abcd.txt", outputs / "web_fetch-4567ef01.txt"
    for path in (own, shared):
        path.write_text("the whole text")
    past = time.time() - 60
    for path in (own, shared):
        os.utime(path, (past, past))

    def footer(path: Path) -> str:
        return f"[large output: 9 KB, saved to {path}; Read more with read_file path={path}]"

    call = {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    await memory.append_message("s", {"role": "user", "content": "read my notes"})
    await memory.append_message("s", {"role": "assistant", "content": "", "tool_calls": [call]})
    await memory.append_message(
        "s", {"role": "tool", "tool_call_id": "c1", "content": f"{footer(own)}\n{footer(shared)}"}
    )
    await memory.append_message("t", {"role": "user", "content": f"see {footer(shared)}"})
    outcome = await forget_session(memory, "s", outputs_dir=outputs)
    assert outcome.outputs_removed == 1
    assert not own.exists() and shared.read_text() == "the whole text"
    assert "1 saved output removed" in sessions.outcome_text(outcome)
