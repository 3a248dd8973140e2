"""Matrix on the channel layer, through a real Synapse: owner approvals (a reaction, a reply)
and scheduled results delivered to the room that asked, or to the owner's direct room."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from mautrix.crypto.attachments import decrypt_attachment
from mautrix.types import RoomID

from luna.scheduler.clock import ManualClock
from luna.scheduler.model import OWNER, Requester, Target, TaskRequest, owner_target
from luna.tools.permissions import approval_text
from tests.conftest import Reply
from tests.frontends.matrix.conftest import World

LAUNCH = Reply(tool_calls=[{"name": "launch", "arguments": '{"target": "rocket"}'}])


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def prompt_of(world: World, room: str) -> dict[str, Any] | None:
    msgs = world.owner.messages_from(room, world.bot.user_id)
    return next((m for m in msgs if "may I run" in m["content"].get("body", "")), None)


def reactions_on(world: World, room: str, event_id: str) -> list[tuple[str, str]]:
    return [
        (e["sender"], e["content"]["m.relates_to"]["key"])
        for e in world.owner.events
        if e.get("room_id") == room
        and e.get("type") == "m.reaction"
        and e["content"].get("m.relates_to", {}).get("event_id") == event_id
    ]


async def open_group(world: World) -> str:
    owner, stranger, bot = world.owner, world.stranger, world.bot.user_id
    room = await owner.create_room([bot, stranger.user_id], encrypted=True)
    await stranger.client.join_room_by_id(RoomID(room))
    await owner.wait_joined(room, stranger.user_id)
    await owner.wait_joined(room, bot)
    return room


async def test_matrix_approval_counts_only_the_owners_reaction(world: World) -> None:
    world.llm_server.script(LAUNCH, Reply("Launched."))
    await world.start_luna()
    room = await open_group(world)
    mention = {"m.mentions": {"user_ids": [world.bot.user_id]}}
    await world.owner.say(room, f"{world.bot.user_id} launch the rocket", **mention)
    prompt = await world.owner.wait_until(lambda: prompt_of(world, room))
    assert "rocket" in prompt["content"]["body"] and prompt["content"]["msgtype"] == "m.notice"
    bot = world.bot.user_id
    await world.owner.wait_until(
        lambda: {(bot, "✅"), (bot, "❌")} <= set(reactions_on(world, room, prompt["event_id"]))
    )  # the choices offered to click
    await world.stranger.react(room, prompt["event_id"], "✅")  # not the owner: no answer
    await world.owner.wait_until(
        lambda: (world.stranger.user_id, "✅") in reactions_on(world, room, prompt["event_id"])
    )
    assert len(world.llm_server.requests) == 1  # still waiting for the owner
    await world.owner.react(room, prompt["event_id"], "✅")
    await world.owner.answer(room, bot, "Launched.", count=2)
    assert any("launched rocket" in r for r in tool_results(world.llm_server.requests[1]))
    await world.owner.wait_until(  # the prompt, edited to its outcome
        lambda: any(
            m["content"]["body"] == "🔐 `launch`: ✅ allowed"
            for m in world.owner.messages_from(room, bot)
            if m["event_id"] == prompt["event_id"]
        )
    )


async def test_matrix_approval_denied_by_the_owners_reply(world: World) -> None:
    target = "rocket " + "with a long payload manifest " * 40  # past the prompt's preview
    call = {"name": "launch", "arguments": json.dumps({"target": target})}
    world.llm_server.script(Reply(tool_calls=[call]), Reply("Not launched."))
    await world.start_luna()
    room = await world.owner.create_room([world.bot.user_id], encrypted=True, direct=True)
    await world.owner.wait_joined(room, world.bot.user_id)
    await world.owner.say(room, "launch it")
    prompt = await world.owner.wait_until(lambda: prompt_of(world, room))
    assert "The whole text follows as a file." in prompt["content"]["body"]
    file = await world.owner.wait_until(
        lambda: next((m["content"] for m in world.owner.messages_from(room, world.bot.user_id)
                      if m["content"].get("msgtype") == "m.file"), None)
    )  # fmt: skip
    assert file["body"] == "launch.txt" and "url" not in file  # encrypted, in an encrypted room
    enc = file["file"]
    data = await world.owner.client.download_media(enc["url"])
    whole = decrypt_attachment(data, enc["key"]["k"], enc["hashes"]["sha256"], enc["iv"])
    assert whole.decode() == approval_text({"target": target})
    reply = {"m.relates_to": {"m.in_reply_to": {"event_id": prompt["event_id"]}}}
    await world.owner.say(room, "no", **reply)
    await world.owner.answer(room, world.bot.user_id, "Not launched.", count=2)
    assert "declined" in tool_results(world.llm_server.requests[1])[0]
    asked = [r["messages"][-1]["content"] for r in world.llm_server.requests]
    assert not any(a == "no" for a in asked)  # the answer was never a message to the model


async def test_matrix_reminder_is_delivered_to_the_room_that_asked(world: World) -> None:
    clock = ManualClock(dt.datetime(2026, 12, 1, 7, 0, tzinfo=dt.UTC))
    luna = await world.start_luna(clock=clock)
    assert luna.scheduler is not None
    room = await open_group(world)
    call = {"name": "schedule_task", "arguments": {"text": "water the plants", "after": "1h"}}
    world.llm_server.script(Reply(tool_calls=[call]), Reply("Will do."))
    mention = {"m.mentions": {"user_ids": [world.bot.user_id]}}
    await world.owner.say(room, f"{world.bot.user_id} remind me in an hour", **mention)
    await world.owner.answer(room, world.bot.user_id, "Will do.")
    (task,) = await luna.scheduler.api.list(Requester.owner(), include_finished=True)
    owner = world.owner.user_id
    assert task.creator == OWNER and task.scope == "owner"  # one owner across apps
    assert task.target == Target("matrix", {"room_id": room, "user_id": owner})
    clock.advance(3600)
    await luna.scheduler.tick_once()
    msgs = await world.owner.answer(room, world.bot.user_id, "⏰ Reminder: water the plants", 2)
    assert "m.relates_to" not in msgs[-1]["content"]  # a message of its own, in the room
    history = await luna.memory.prompt_history(f"mx-room-{room}-{owner}")
    assert history[1][-1].content == "⏰ Reminder: water the plants"


async def test_matrix_owner_default_is_their_direct_room(world: World) -> None:
    clock = ManualClock(dt.datetime(2026, 12, 1, 7, 0, tzinfo=dt.UTC))
    luna = await world.start_luna(clock=clock)
    assert luna.scheduler is not None
    target = owner_target(luna.frontend.cfg)
    assert target == Target("matrix", {"user_id": world.owner.user_id, "is_dm": True})
    room = await world.owner.create_room([world.bot.user_id], encrypted=True, direct=True)
    await world.owner.wait_joined(room, world.bot.user_id)
    await luna.scheduler.api.add(
        TaskRequest(text="stretch", after="5m"), Requester.owner("cli", target)
    )
    clock.advance(300)
    await luna.scheduler.tick_once()
    await world.owner.answer(room, world.bot.user_id, "⏰ Reminder: stretch")


async def test_matrix_owner_default_opens_a_direct_room_when_none_is(world: World) -> None:
    clock = ManualClock(dt.datetime(2026, 12, 1, 7, 0, tzinfo=dt.UTC))
    luna = await world.start_luna(clock=clock)
    assert luna.scheduler is not None
    who = Requester.owner("cli", owner_target(luna.frontend.cfg))
    await luna.scheduler.api.add(TaskRequest(text="drink water", after="5m"), who)
    clock.advance(300)
    await luna.scheduler.tick_once()
    owner, bot = world.owner, world.bot.user_id

    def invited() -> str | None:
        return next(
            (e["room_id"] for e in owner.events
             if e.get("type") == "m.room.member" and e.get("state_key") == owner.user_id
             and e.get("sender") == bot and e["content"].get("membership") == "invite"),
            None,
        )  # fmt: skip

    room = await owner.wait_until(invited)
    await owner.client.join_room_by_id(RoomID(room))
    await owner.answer(room, bot, "⏰ Reminder: drink water")  # sent before the join, readable
