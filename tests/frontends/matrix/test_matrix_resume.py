"""A Matrix turn whose user message was committed but never answered, through a real Synapse:
Luna stops (gracefully, in-process) or is killed (SIGKILL, a real ``python -m luna``) while
the model holds the reply, starts again on the same data folder, and answers it exactly once,
in its encrypted room (and thread), even when the sync brings the message again."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from luna import observe
from tests.conftest import Reply
from tests.frontends.matrix.conftest import World
from tests.frontends.matrix.test_matrix_encrypted import open_dm
from tests.frontends.matrix.test_matrix_rooms import mention, open_group
from tests.luna_process import data_env


def asked(world: World) -> list[str]:
    """The last user message of each request the model was sent."""
    return [str(r["messages"][-1]["content"]) for r in world.llm_server.requests]


def by_text(body: dict[str, Any]) -> Reply:
    """The second process's model: each message gets its own answer, whatever the order."""
    last = str(body["messages"][-1]["content"])
    return Reply("answer to the held one" if "held" in last else "answer to the quick one")


def count(db: Path, query: str, *args: str) -> int:
    """A count read on a connection of its own, closed at once (an open one would keep its
    snapshot of the database)."""
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return int(conn.execute(query, args).fetchone()[0])


def unanswered(db: Path) -> int:
    return count(db, "SELECT count(*) FROM channel_turns WHERE answered_at IS NULL")


def user_messages(db: Path, text: str) -> int:
    query = "SELECT count(*) FROM messages WHERE role = 'user' AND content LIKE ?"
    return count(db, query, f"%{text}%")


@pytest.fixture
def log_dir(tmp_path: Path) -> Iterator[Path]:
    """Luna's event log, as ``luna run`` writes it, for the in-process Luna too."""
    observe.setup(tmp_path / "events", console=False)
    yield tmp_path / "events"
    observe.shutdown()


async def test_matrix_turn_stored_but_unanswered_at_stop_is_answered_once_after_restart(
    world: World, log_dir: Path
) -> None:
    """Two encrypted DMs: one message held in its burst keeps the sync token before both
    batches; the other's user message is committed, then Luna stops while the model holds
    its reply (the turn is cancelled after ``shutdown_grace``). The next start answers it
    from the ledger, and the sync that brings it again starts no second turn."""
    world.llm_server.script(Reply("too late", delay=60))  # the first process never answers
    luna = await world.start_luna(burst_window=30.0, agent={"shutdown_grace": 0.5})
    held_room, quick_room = await open_dm(world), await open_dm(world)
    await world.owner.say(held_room, "the held message")
    keeper, channel = luna.frontend.keeper, luna.frontend.channel
    assert keeper is not None and channel is not None
    await world.owner.wait_until(lambda: keeper.unsettled == 1)
    channel.pipeline._window = 0.0  # from now on a burst closes at once
    quick_id = await world.owner.say(quick_room, "the quick message")
    db = luna.frontend.cfg.memory.db_path
    await world.owner.wait_until(lambda: world.llm_server.requests and unanswered(db) == 1)
    assert keeper.unsettled == 1  # the token waits before both messages' batches
    await world.stop_luna()
    bot = world.bot.user_id
    assert world.owner.messages_from(quick_room, bot) == []
    assert unanswered(db) == 1

    world.llm_server.default = by_text
    luna = await world.start_luna(burst_window=0.2)
    await world.owner.answer(quick_room, bot, "answer to the quick one")
    await world.owner.answer(held_room, bot, "answer to the held one")
    keeper, sync = luna.frontend.keeper, luna.frontend.sync
    assert keeper is not None and sync is not None
    batches = sync.batches
    await world.owner.wait_until(lambda: sync.batches > batches and keeper.unsettled == 0)
    resumed = events_named(log_dir, "channel_resume")
    assert [(e["frontend"], e["events"]) for e in resumed] == [("matrix", 1)]
    synced_again = events_named(log_dir, "matrix_taken_before")
    assert [e["event_id"] for e in synced_again] == [quick_id]  # and skipped
    assert len(world.owner.messages_from(quick_room, bot)) == 1  # once, in its own room
    assert len(world.owner.messages_from(held_room, bot)) == 1
    assert user_messages(db, "the quick message") == 1  # answered, not logged again
    quick = [a for a in asked(world) if a.startswith("the quick message")]
    assert len(quick) == 2  # the first process's request, and the resumed turn's
    assert sum(a.startswith("the held message") for a in asked(world)) == 1
    await world.owner.wait_until(lambda: unanswered(db) == 0, within=10)  # marked after sending


def start(world: World, tmp_path: Path) -> subprocess.Popen[str]:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[matrix]\nhomeserver = "{world.synapse.url}"\nuser_id = "{world.bot.user_id}"\n'
        f'owner = "{world.owner.user_id}"\nedit_interval = 0.2\nburst_window = 0.2\n'
        "request_timeout = 10.0\n[llm]\nmax_retries = 0\ntimeout = 120.0\n"
    )
    (tmp_path / "mcp_servers.json").write_text('{"servers": {}}')
    env = data_env(tmp_path, world.llm_server.url, LUNA_CONFIG=str(config),
                   MATRIX_ACCESS_TOKEN=world.bot.access_token)  # fmt: skip
    return subprocess.Popen(
        [sys.executable, "-m", "luna", "run", "--no-embedded"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM) -> str:
    os.killpg(proc.pid, sig)
    out, _ = proc.communicate(timeout=60)
    return out


def events_named(log_dir: Path, name: str) -> list[dict[str, Any]]:
    lines = (line for f in sorted(log_dir.glob("luna-*.jsonl")) for line in f.open())
    return [e for e in map(json.loads, lines) if e.get("event") == name]


async def test_matrix_kill_9_between_commit_and_reply_answers_exactly_once(
    world: World, tmp_path: Path
) -> None:
    """A real ``python -m luna run`` killed with SIGKILL once the owner's encrypted message
    is committed and the model holds the reply; started again, it answers once."""
    world.llm_server.script(Reply("too late", delay=60))
    first = start(world, tmp_path)
    db, bot = tmp_path / "data" / "luna.db", world.bot.user_id
    try:
        room = await open_dm(world)  # Luna joins: she is syncing
        await world.owner.say(room, "are you there?")
        await world.owner.wait_until(
            lambda: world.llm_server.requests and db.exists() and unanswered(db) == 1, within=90
        )
    finally:
        out = stop(first, signal.SIGKILL)
    assert world.owner.messages_from(room, bot) == [], out[-3000:]

    world.llm_server.script(Reply("Yes, here: answered once."))
    second = start(world, tmp_path)
    try:
        await world.owner.answer(room, bot, "Yes, here: answered once.", within=90)
        await world.owner.wait_until(lambda: unanswered(db) == 0)
    finally:
        out = stop(second)
    assert second.returncode == 0, out[-3000:]
    assert len(world.owner.messages_from(room, bot)) == 1
    assert user_messages(db, "are you there?") == 1  # answered, not logged again
    assert [a.startswith("are you there?") for a in asked(world)] == [True, True]
    resumed = events_named(tmp_path / "data" / "logs", "channel_resume")
    assert [(e["frontend"], e["events"]) for e in resumed] == [("matrix", 1)]


async def test_matrix_unanswered_turn_in_a_thread_is_answered_in_the_thread(world: World) -> None:
    """In an encrypted group room, a mention in a thread: stopped while the model holds the
    reply, answered after the restart in that thread, once."""
    world.llm_server.script(Reply("too late", delay=60), Reply("answered in the thread"))
    luna = await world.start_luna(agent={"shutdown_grace": 0.5})
    room = await open_group(world)
    root = await world.owner.say(room, "a topic for a thread")
    relation = {"rel_type": "m.thread", "event_id": root, "is_falling_back": True,
                "m.in_reply_to": {"event_id": root}}  # fmt: skip
    in_thread = {"m.relates_to": relation}
    await world.owner.say(room, "", **mention(world, "still there?"), **in_thread)
    db = luna.frontend.cfg.memory.db_path
    await world.owner.wait_until(lambda: world.llm_server.requests and unanswered(db) == 1)
    await world.stop_luna()
    await world.start_luna()
    bot = world.bot.user_id
    msgs = await world.owner.answer(room, bot, "answered in the thread")
    assert len(msgs) == 1
    assert msgs[0]["content"]["m.relates_to"]["rel_type"] == "m.thread"
    assert msgs[0]["content"]["m.relates_to"]["event_id"] == root
    await world.owner.wait_until(lambda: unanswered(db) == 0, within=10)
    assert user_messages(db, "still there?") == 1
