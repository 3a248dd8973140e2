"""The threads Luna follows, read from the real session log: a thread's session with one of
her answers is followed, by a fresh ``Following`` too (a restart); one without is not."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from luna.config import MemoryConfig
from luna.frontends.channels.following import Following
from luna.memory import Memory
from luna.memory.sessions import forget_session


@pytest.fixture
async def memory(tmp_path: Path) -> AsyncIterator[Memory]:
    mem = Memory(MemoryConfig(db_path=tmp_path / "data" / "luna.db"))  # type: ignore[call-arg]
    await mem.open(background=False, use_vectors=False)  # keyword recall: no model load
    try:
        yield mem
    finally:
        await mem.close()


async def test_following_a_thread_answered_in_survives_a_new_following(memory: Memory) -> None:
    await memory.append_message("mx-thread-$a", {"role": "user", "content": "Luna, a question"})
    await memory.append_message("mx-thread-$b", {"role": "user", "content": "people talking"})
    assert not await Following(memory.store).follows("mx-thread-$a")  # asked, not answered
    await memory.append_message("mx-thread-$a", {"role": "assistant", "content": "an answer"})
    fresh = Following(memory.store)  # as after a restart: nothing in memory
    assert await fresh.follows("mx-thread-$a")
    assert not await fresh.follows("mx-thread-$b")
    assert not await fresh.follows("mx-thread-$never")


async def test_following_an_admitted_thread_before_its_answer(memory: Memory) -> None:
    following = Following(memory.store)
    following.follow("thread-42")  # the first message is in its turn: no answer logged yet
    assert await following.follows("thread-42")
    assert not await Following(memory.store).follows("thread-42")  # not on record


async def test_following_a_forgotten_thread_stops_after_a_restart(memory: Memory) -> None:
    await memory.append_message("thread-7", {"role": "user", "content": "hi"})
    await memory.append_message("thread-7", {"role": "assistant", "content": "hello"})
    assert await Following(memory.store).follows("thread-7")
    await forget_session(memory, "thread-7")
    assert not await Following(memory.store).follows("thread-7")
