"""A restart between an update and its reply: a real ``python -m luna`` killed with SIGKILL
after it acknowledged the update (its user message committed), then started again: the
message is answered exactly once and logged once; a turn left by someone no longer allowed
is not answered."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from luna.config import Config
from luna.frontends.channels.cursor import ChannelLedger
from luna.frontends.telegram.updates import CODEC
from luna.memory import Memory
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.telegram_server import BOT_ID, TOKEN, FakeTelegram
from tests.frontends.telegram.conftest import FRIEND, OWNER
from tests.luna_process import data_env


def start(tmp_path: Path, llm_server: FakeLLMServer, config: Path) -> subprocess.Popen[str]:
    (tmp_path / "mcp_servers.json").write_text('{"servers": {}}')
    env = data_env(tmp_path, llm_server.url, TELEGRAM_TOKEN=TOKEN, LUNA_CONFIG=str(config))
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


def user_messages(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        rows = conn.execute(
            "SELECT content FROM messages WHERE session_id = ? AND role = 'user' ORDER BY id",
            (f"tg-{OWNER}",),
        ).fetchall()
    return [r[0] for r in rows]


def write_config(tmp_path: Path, telegram: FakeTelegram, burst_window: float) -> Path:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[telegram]\nbase_url = "{telegram.url}"\nowner_id = {OWNER}\npoll_timeout = 1\n'
        f"burst_window = {burst_window}\nedit_interval = 0.5\n"
        "[llm]\nmax_retries = 0\ntimeout = 120.0\n"
    )
    return config


async def test_telegram_kill_between_update_and_reply_answers_exactly_once(
    tmp_path: Path, telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    config = write_config(tmp_path, telegram, 0.0)
    llm_server.script(Reply(content="too late", delay=60))  # the first process never answers
    first = start(tmp_path, llm_server, config)
    try:
        update = telegram.message(OWNER, "are you there?")
        # Acknowledged: the next getUpdates asks past it, so the user message is committed.
        await telegram.wait_for(lambda: max(telegram.offsets, default=0) > update, within=90)
        await telegram.wait_for(lambda: llm_server.requests, within=30)
    finally:
        stop(first, signal.SIGKILL)
    assert telegram.shown(OWNER) == []
    db = tmp_path / "data" / "luna.db"
    assert user_messages(db) == ["are you there?"]

    llm_server.script(Reply(content="Yes, here: answered once."))
    second = start(tmp_path, llm_server, config)
    try:
        await telegram.wait_for(lambda: telegram.shown(OWNER), within=90)
        await telegram.wait_for(lambda: len(telegram.called("getUpdates")) > 6, within=30)
        await asyncio.sleep(0.5)
        assert telegram.shown(OWNER) == ["Yes, here: answered once."]
    finally:
        out = stop(second)
    assert second.returncode == 0, out[-3000:]
    assert user_messages(db) == ["are you there?"]  # answered, not logged again
    last = llm_server.requests[-1]["messages"]
    assert [m["content"] for m in last if m["role"] == "user"][-1].startswith("are you there?")
    with sqlite3.connect(db) as conn:
        unanswered = "SELECT count(*) FROM channel_turns WHERE answered_at IS NULL"
        assert conn.execute(unanswered).fetchone() == (0,)


async def test_telegram_kill_before_the_message_is_committed_gets_it_again(
    tmp_path: Path, telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    config = write_config(tmp_path, telegram, 20.0)  # the update waits in its burst
    first = start(tmp_path, llm_server, config)
    try:
        update = telegram.message(OWNER, "first try")
        await telegram.wait_for(lambda: update in telegram.delivered, within=90)
        await asyncio.sleep(1.5)  # more polls: the offset must not pass an uncommitted update
    finally:
        stop(first, signal.SIGKILL)
    assert max(telegram.offsets) <= update and telegram.pending_updates() == [update]
    db = tmp_path / "data" / "luna.db"
    assert user_messages(db) == []
    write_config(tmp_path, telegram, 0.0)
    llm_server.script(Reply(content="Got it after the restart."))
    second = start(tmp_path, llm_server, config)
    try:
        await telegram.wait_for(lambda: telegram.shown(OWNER), within=90)
        await telegram.wait_for(lambda: max(telegram.offsets) > update, within=30)
        await asyncio.sleep(0.5)
        assert telegram.shown(OWNER) == ["Got it after the restart."]
    finally:
        out = stop(second)
    assert second.returncode == 0, out[-3000:]
    assert user_messages(db) == ["first try"]


async def test_telegram_turn_left_by_someone_no_longer_allowed_is_not_answered(
    start_luna: Callable[..., Any],
    telegram: FakeTelegram,
    llm_server: FakeLLMServer,
    luna_config: Callable[..., Config],
) -> None:
    """A dead process left two turns unanswered: the owner's is answered at the next start;
    the other's author was taken off ``allowed_users`` meanwhile, so it is only marked."""
    memory = Memory(luna_config().memory)
    await memory.open(background=False, use_vectors=False)
    try:
        ledger = ChannelLedger(memory.store, "telegram", str(BOT_ID), CODEC)
        for update, who in ((7, FRIEND), (8, OWNER)):
            session = f"tg-{who}"
            row = {"update_id": update, "author_id": who, "chat_id": who, "thread_id": None,
                   "session_id": session, "text": f"from {who}", "is_private": True}  # fmt: skip
            message_id = await memory.append_message(
                session, {"role": "user", "content": f"from {who}"}
            )
            await ledger.stored("9", message_id, [CODEC.decode(row)])
    finally:
        await memory.close()
    llm_server.script(Reply(content="Answered after the restart."))
    luna = await start_luna({"allowed_users": []})
    # shown() follows the streamed edits: wait for the whole reply, not its first piece.
    await telegram.wait_for(
        lambda: telegram.shown(OWNER) == ["Answered after the restart."], within=30
    )
    assert telegram.shown(FRIEND) == [] and len(llm_server.requests) == 1
    query = "SELECT event_id FROM channel_turns WHERE answered_at IS NOT NULL ORDER BY event_id"
    await telegram.wait_for(lambda: luna.memory.store.query(query) == [("7",), ("8",)], within=10)
