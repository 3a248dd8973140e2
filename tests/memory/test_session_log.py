"""Session log: append-only messages, prompt view, compaction cut, migrations, kill -9."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from luna.agent.prompt import INTERRUPTED_RESULT
from luna.config import MemoryConfig
from luna.memory import Memory
from luna.memory.storage import db, session_log
from luna.memory.storage.store import MIGRATIONS, Store
from luna.messages import Usage
from tests.history import prompt_view
from tests.luna_process import REPO


def _call(call_id: str, name: str = "bash", args: str = '{"cmd": "ls"}') -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


async def test_session_log_round_trip_returns_what_was_stored(memory: Memory) -> None:
    sid = "s1"
    await memory.append_message(sid, {"role": "user", "content": "list files"}, context="[time]")
    await memory.append_message(
        sid,
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("c1")],
            "reasoning_content": "I should list them.",
        },
        usage=Usage(prompt_tokens=100, completion_tokens=5, total_tokens=105),
    )
    await memory.append_message(sid, {"role": "tool", "tool_call_id": "c1", "content": "a.txt"})
    await memory.append_message(sid, {"role": "assistant", "content": "There is a.txt."})
    await memory.append_message("other", {"role": "user", "content": "unrelated"})
    summary, records = await memory.prompt_history(sid)
    assert summary is None
    assert [(r.role, r.content) for r in records] == [
        ("user", "list files"),
        ("assistant", ""),
        ("tool", "a.txt"),
        ("assistant", "There is a.txt."),
    ]
    assert records[0].context == "[time]"  # kept apart: the prompt attaches it
    assert records[1].tool_calls == [_call("c1")]
    assert records[1].reasoning == "I should list them."  # replayed exactly, for the KV cache
    assert records[2].tool_call_id == "c1"
    rows = memory.store.query("SELECT prompt_tokens FROM messages WHERE role='assistant'")
    assert rows[0][0] == 100


async def test_session_log_messages_are_append_only(memory: Memory) -> None:
    mid = await memory.append_message("s", {"role": "user", "content": "hello"})
    with pytest.raises(db.Error):
        memory.store.query("UPDATE messages SET content = 'x' WHERE id = ?", (mid,))
    with pytest.raises(db.Error):
        memory.store.query("DELETE FROM messages WHERE id = ?", (mid,))


async def test_session_log_compaction_cut_hides_originals_which_stay_searchable(
    memory: Memory,
) -> None:
    sid = "s"
    ids = [await memory.append_message(sid, {"role": "user", "content": "one"})]
    ids.append(
        await memory.append_message(
            sid, {"role": "assistant", "content": "", "tool_calls": [_call("a"), _call("b")]}
        )
    )
    for call_id in ("a", "b"):
        result = {"role": "tool", "tool_call_id": call_id, "content": call_id.upper()}
        ids.append(await memory.append_message(sid, result))
    ids.append(await memory.append_message(sid, {"role": "assistant", "content": "done"}))
    await memory.set_summary(sid, "They said one; tools ran.", ids[3])
    summary, records = await memory.prompt_history(sid)
    assert summary == "They said one; tools ran."
    assert [r.id for r in records] == [ids[4]]
    hits = await memory.recall("one", k=5)
    assert any(h.kind == "message" and h.text == "one" for h in hits)
    assert (await memory.summary(sid))[1] == ids[3]
    backlog = session_log.backlog(memory.store, sid)  # the librarian's after-turn check
    assert backlog == ("They said one; tools ran.", ids[3], 1)
    assert session_log.backlog(memory.store, "never-seen") == (None, 0, 0)


async def test_session_log_split_batch_and_lost_result_still_make_a_valid_prompt(
    memory: Memory,
) -> None:
    sid = "s"
    await memory.append_message(sid, {"role": "user", "content": "run"})
    call = {"role": "assistant", "content": "", "tool_calls": [_call("x")]}
    await memory.append_message(sid, call)  # the process died before its result was logged
    await memory.append_message(sid, {"role": "user", "content": "hello again"})
    _, history = await prompt_view(memory, sid)
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "user"]
    assert history[2] == {"role": "tool", "tool_call_id": "x", "content": INTERRUPTED_RESULT}


def test_migrations_on_blank_database(tmp_path: Path) -> None:
    store = Store(tmp_path / "blank.db")
    applied = store.migrate()
    assert applied == [name for name, _ in MIGRATIONS]
    assert store.migrate() == []
    assert store.applied_migrations() == applied
    assert store.query("PRAGMA journal_mode")[0][0] == "wal"
    assert store.query("PRAGMA synchronous")[0][0] == 1  # NORMAL; durable commits use FULL
    store.close()


def _schema(store: Store) -> list[tuple]:
    """Every table, index and trigger with its SQL: what a database's schema is."""
    return store.query(
        "SELECT type, name, tbl_name, sql FROM sqlite_master "
        "WHERE name NOT LIKE 'sqlite_%' ORDER BY type, name"
    )


def test_migrations_bring_a_database_from_any_release_to_the_fresh_schema(tmp_path: Path) -> None:
    fresh = Store(tmp_path / "fresh.db")
    fresh.migrate()
    expected = _schema(fresh)
    fresh.close()
    assert {row[1] for row in expected} >= {"sessions", "messages", "memories"}
    for done in range(1, len(MIGRATIONS)):  # a database left at each earlier release
        path = tmp_path / f"at-{done}.db"
        old = Store(path)
        old.migrate(MIGRATIONS[:done])
        old.close()
        upgraded = Store(path)
        assert upgraded.migrate() == [name for name, _ in MIGRATIONS[done:]]
        assert upgraded.applied_migrations() == [name for name, _ in MIGRATIONS]
        assert _schema(upgraded) == expected, f"upgraded from {done} migrations"
        upgraded.close()


async def test_migrations_upgrade_old_database_and_index_its_messages(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old = Store(path)
    assert old.migrate(MIGRATIONS[:1]) == [MIGRATIONS[0][0]]
    old.conn.execute("INSERT INTO sessions VALUES ('s', 'owner', '2025-01-01T00:00:00+00:00')")
    old.conn.execute(
        "INSERT INTO messages (session_id, role, content, created_at) VALUES "
        "('s', 'user', 'my bicycle is a green Gazelle', '2025-01-01T00:00:00+00:00')"
    )
    old.close()
    mem = Memory(MemoryConfig(db_path=path))
    await mem.open(background=False)
    try:
        assert mem.store.applied_migrations() == [n for n, _ in MIGRATIONS]
        await mem.flush_index()
        hits = await mem.recall("what bike do I ride", k=3)
        assert hits and "Gazelle" in hits[0].text
        _, records = await mem.prompt_history("s")
        assert [(r.role, r.content, r.reasoning) for r in records] == [
            ("user", "my bicycle is a green Gazelle", None)
        ]
    finally:
        await mem.close()


WRITER = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from luna.config import MemoryConfig
    from luna.memory import Memory

    async def main():
        mem = Memory(MemoryConfig(db_path=Path(sys.argv[1])))
        await mem.open(background=False)
        i = 0
        while True:
            mid = await mem.append_message("s", {"role": "user", "content": f"message {i}"})
            print(mid, flush=True)
            i += 1

    asyncio.run(main())
    """
)


def _write_until_killed(path: Path, script: Path, count: int) -> list[int]:
    """Run the writer, read ``count`` acknowledged ids, SIGKILL it right after the last."""
    proc = subprocess.Popen(
        [sys.executable, str(script), str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    acked: list[int] = []
    assert proc.stdout is not None
    while len(acked) < count:
        line = proc.stdout.readline()
        assert line, f"writer died: {proc.stderr.read() if proc.stderr else ''}"
        acked.append(int(line))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    return acked


async def test_append_message_survives_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "durable.db"
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    acked = await asyncio.to_thread(_write_until_killed, path, script, 25)
    mem = Memory(MemoryConfig(db_path=path))
    await mem.open(background=False)
    try:
        _, records = await mem.prompt_history("s")
        stored = {int(r[0]) for r in mem.store.query("SELECT id FROM messages")}
        assert set(acked) <= stored
        assert [r.content for r in records[: len(acked)]] == [
            f"message {i}" for i in range(len(acked))
        ]
    finally:
        await mem.close()


async def test_model_mismatch_is_refused_with_reindex_hint(tmp_path: Path, embedder) -> None:
    from luna.errors import MemoryStoreError

    path = tmp_path / "m.db"
    mem = Memory(MemoryConfig(db_path=path))
    mem.embedder = embedder
    await mem.open(background=False)
    await mem.add_memory("the boat is called Aurora")
    await mem.close()
    other = Memory(
        MemoryConfig(
            db_path=path, embedding_model="nomic-ai/nomic-embed-text-v1.5", embedding_dim=256
        )
    )
    with pytest.raises(MemoryStoreError, match="luna memory reindex"):
        await other.open()
