"""Luna in Matrix rooms, through a real Synapse: mentions, threads, invites, size, rate limits."""

from __future__ import annotations

from mautrix.types import RoomID

from tests.conftest import Reply
from tests.frontends.matrix.conftest import World


async def open_group(world: World) -> str:
    """An encrypted room of the owner, the stranger and Luna."""
    owner, stranger, bot = world.owner, world.stranger, world.bot.user_id
    room = await owner.create_room([bot, stranger.user_id], encrypted=True)
    await stranger.client.join_room_by_id(RoomID(room))
    await owner.wait_joined(room, stranger.user_id)
    await owner.wait_joined(room, bot)
    return room


def mention(world: World, text: str) -> dict:
    return {"m.mentions": {"user_ids": [world.bot.user_id]}, "body": f"{world.bot.user_id} {text}"}


async def test_matrix_room_answers_only_when_mentioned(world: World) -> None:
    world.llm_server.script(Reply("you called?"))
    await world.start_luna()
    room = await open_group(world)
    await world.owner.say(room, "just chatting with the stranger, not Luna")
    asked = await world.owner.say(room, "", **mention(world, "what's the time?"))
    msgs = await world.owner.answer(room, world.bot.user_id, "you called?")
    assert len(msgs) == 1
    relation = msgs[0]["content"]["m.relates_to"]
    assert relation == {"m.in_reply_to": {"event_id": asked}}  # answers the mention
    prompts = [r["messages"][-1]["content"] for r in world.llm_server.requests]
    assert len(prompts) == 1 and "what's the time?" in prompts[0]
    assert not any("not Luna" in p for p in prompts)


def in_thread(root: str) -> dict:
    """A message in the thread of ``root``, as Element sends it (falling back to the root)."""
    return {
        "m.relates_to": {
            "rel_type": "m.thread",
            "event_id": root,
            "is_falling_back": True,
            "m.in_reply_to": {"event_id": root},
        }
    }


async def test_matrix_thread_is_a_session_of_its_own(world: World) -> None:
    world.llm_server.script(Reply("thread answer one"), Reply("thread answer two"))
    await world.start_luna()
    room = await open_group(world)
    root = await world.owner.say(room, "a topic for a thread")
    threaded = in_thread(root)
    await world.owner.say(room, "", **mention(world, "first in thread"), **threaded)
    await world.owner.answer(room, world.bot.user_id, "thread answer one")
    await world.owner.say(room, "a follow-up without mention", **threaded)
    msgs = await world.owner.answer(room, world.bot.user_id, "thread answer two", count=2)
    for m in msgs:
        assert m["content"]["m.relates_to"]["rel_type"] == "m.thread"
        assert m["content"]["m.relates_to"]["event_id"] == root
    second = world.llm_server.requests[-1]["messages"]
    history = " ".join(str(m.get("content")) for m in second)
    assert "first in thread" in history and "thread answer one" in history
    assert "a topic for a thread" not in history  # the root was never a message to Luna


async def test_matrix_thread_answered_in_is_followed_after_restart(world: World) -> None:
    """Luna answers a mention in a thread, restarts on the same data folder, and answers a
    follow-up there without a mention, once; a thread she never answered in stays unheard
    without one, before the restart and after it."""
    world.llm_server.script(Reply("thread answer one"))
    await world.start_luna()
    room, bot = await open_group(world), world.bot.user_id
    followed = await world.owner.say(room, "a topic Luna is asked about")
    ignored = await world.owner.say(room, "a topic between people")
    await world.owner.say(room, "no mention in here", **in_thread(ignored))
    await world.owner.say(room, "", **mention(world, "first in thread"), **in_thread(followed))
    await world.owner.answer(room, bot, "thread answer one")
    await world.stop_luna()

    world.llm_server.script(Reply("thread answer two"))
    await world.start_luna()
    await world.owner.say(room, "still nobody asks Luna", **in_thread(ignored))
    await world.owner.say(room, "a follow-up without mention", **in_thread(followed))
    msgs = await world.owner.answer(room, bot, "thread answer two", count=2)
    assert [m["content"]["body"] for m in msgs] == ["thread answer one", "thread answer two"]
    assert msgs[-1]["content"]["m.relates_to"]["event_id"] == followed  # in its thread
    prompts = [str(r["messages"][-1]["content"]) for r in world.llm_server.requests]
    assert len(prompts) == 2 and "a follow-up without mention" in prompts[-1]
    assert not any("no mention in here" in p or "nobody asks" in p for p in prompts)
    luna = world.luna
    assert luna is not None
    sync, keeper = luna.frontend.sync, luna.frontend.keeper
    assert sync is not None and keeper is not None
    batches = sync.batches  # the next batch brings the answer back: all before it is settled
    await world.owner.wait_until(lambda: sync.batches > batches and keeper.unsettled == 0)
    assert len(world.owner.messages_from(room, bot)) == 2  # answered once
    assert len(world.llm_server.requests) == 2


async def test_matrix_invite_from_stranger_declined(world: World) -> None:
    await world.start_luna()
    bot = world.bot.user_id
    room = await world.stranger.create_room([bot], encrypted=False)

    def left() -> bool:
        return any(
            e.get("room_id") == room
            and e.get("type") == "m.room.member"
            and e.get("state_key") == bot
            and e.get("content", {}).get("membership") == "leave"
            for e in world.stranger.events
        )

    await world.stranger.wait_until(left)
    assert world.llm_server.requests == []


async def test_matrix_reply_over_the_size_limit_is_split(world: World) -> None:
    paragraph = "Luna writes a long paragraph about homelabs and Matrix. " * 30
    long_reply = "\n\n".join(f"{i}: {paragraph.strip()}" for i in range(40))  # ~68 kB
    world.llm_server.script(Reply(long_reply))
    await world.start_luna()
    room = await world.owner.create_room([world.bot.user_id], encrypted=True, direct=True)
    await world.owner.wait_joined(room, world.bot.user_id)
    await world.owner.say(room, "tell me everything")

    def whole() -> list | None:
        msgs = world.owner.messages_from(room, world.bot.user_id)
        joined = "\n\n".join(m["content"]["body"] for m in msgs)
        return msgs if joined == long_reply else None

    msgs = await world.owner.wait_until(whole)
    assert len(msgs) >= 8
    assert all(len(m["content"]["body"].encode()) <= 8_000 for m in msgs)


async def test_matrix_rate_limit_retry_after_is_honoured(world: World) -> None:
    chunks = [f"word{i} " for i in range(12)]
    world.llm_server.script(Reply("".join(chunks), chunks=chunks, chunk_delay=0.25))
    luna = await world.start_luna()
    room = await world.owner.create_room([world.bot.user_id], encrypted=True, direct=True)
    await world.owner.wait_joined(room, world.bot.user_id)
    world.synapse.limit(world.bot.user_id)  # 0.5 events/s, burst 3, from now on
    await world.owner.say(room, "stream me something")
    msgs = await world.owner.answer(room, world.bot.user_id, "".join(chunks).strip())
    outbox = luna.frontend.outbox
    assert outbox is not None and outbox.rate_limited >= 1  # 429s came, the reply still did
    assert outbox.early == 0  # and nothing was sent before a 429's retry_after_ms had passed
    assert msgs[-1]["edits"] >= 1
