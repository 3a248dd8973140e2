"""A logged user message gets its per-turn context attached once; nothing else ever changes."""

from __future__ import annotations

import pytest

from luna.memory import Memory
from luna.memory.storage.store import Store
from tests.history import prompt_view


async def test_context_attached_once_and_replayed(memory: Memory) -> None:
    mid = await memory.append_message("s", {"role": "user", "content": "plan the trip"})
    _, before = await prompt_view(memory, "s")
    assert before == [{"role": "user", "content": "plan the trip"}]
    await memory.set_context(mid, "<context>\nCurrent time: now\n</context>")
    _, after = await prompt_view(memory, "s")
    assert after[0]["content"] == "plan the trip\n\n<context>\nCurrent time: now\n</context>"


def test_context_cannot_be_rewritten_and_content_stays_frozen(tmp_path) -> None:
    store = Store(tmp_path / "x.db")
    store.migrate()
    store.conn.execute("INSERT INTO sessions VALUES ('s', 'owner', '2026-01-01T00:00:00+00:00')")
    store.conn.execute(
        "INSERT INTO messages (session_id, role, content, created_at) VALUES "
        "('s', 'user', 'hello', '2026-01-01T00:00:00+00:00')"
    )
    store.conn.execute("UPDATE messages SET context = 'first' WHERE id = 1")
    for sql in (
        "UPDATE messages SET context = 'second' WHERE id = 1",
        "UPDATE messages SET content = 'rewritten' WHERE id = 1",
        "DELETE FROM messages WHERE id = 1",
    ):
        with pytest.raises(Exception, match="append-only"):
            store.conn.execute(sql)
    assert store.query("SELECT content, context FROM messages") == [("hello", "first")]
    store.close()


def test_context_update_with_other_changes_is_refused(tmp_path) -> None:
    store = Store(tmp_path / "y.db")
    store.migrate()
    store.conn.execute("INSERT INTO sessions VALUES ('s', 'owner', '2026-01-01T00:00:00+00:00')")
    store.conn.execute(
        "INSERT INTO messages (session_id, role, content, created_at) VALUES "
        "('s', 'user', 'hello', '2026-01-01T00:00:00+00:00')"
    )
    with pytest.raises(Exception, match="append-only"):
        store.conn.execute("UPDATE messages SET context = 'c', content = 'x' WHERE id = 1")
    store.close()
