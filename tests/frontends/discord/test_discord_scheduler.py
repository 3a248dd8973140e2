"""Scheduled results on Discord through dpytest: the same DM, thread or channel, the DM opened
when needed, a vanished channel falling back to the DM, and strangers' plain reminders."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any

from discord.ext.test import backend, callbacks

from luna.frontends.discord.delivery import MOVED_NOTE, destination
from luna.scheduler.clock import ManualClock
from luna.scheduler.model import Requester, Target, TaskRequest
from luna.scheduler.service import SchedulerService
from luna.scheduler.tool_port import ToolPort
from luna.tools.builtin import schedule
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.discord.conftest import FRIEND_ID, OWNER_ID, STRANGER_ID, Harness
from tests.history import prompt_view

START = dt.datetime(2026, 12, 1, 7, 0, tzinfo=dt.UTC)


async def with_scheduler(h: Harness) -> tuple[SchedulerService, ManualClock]:
    """The scheduler app builds, bound to this harness's bot, on a hand-moved clock."""
    registry = h.agent.registry
    schedule.register(registry, h.cfg)
    clock = ManualClock(START)
    service = SchedulerService(h.cfg, h.memory, h.agent, registry, clock=clock)
    registry.scheduler = ToolPort(service.api)
    h.bot.deliveries = service.router
    await h.bot.on_ready()  # connected: the bot registers its delivery function
    assert service.router.frontends == ["discord"]
    return service, clock


def said(h: Harness, channel: Any) -> list[str]:
    """The bot's messages in ``channel`` without its tool status lines."""
    return [m["content"] for m in h.bot_messages(channel) if not m["content"].startswith("-# 🔧")]


def schedule_call(**arguments: Any) -> Reply:
    return Reply(tool_calls=[{"name": "schedule_task", "arguments": arguments}])


async def test_discord_reminder_from_a_dm_arrives_in_that_dm_and_its_session(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    h = await make_harness(agent={"timezone": "Europe/Berlin"})
    service, clock = await with_scheduler(h)
    llm_server.script(schedule_call(text="call the dentist", after="2h"), Reply(content="Will do."))
    dm = await h.dm_channel(h.owner)
    await h.say("remind me in two hours to call the dentist", h.owner, channel=dm)
    await h.settle()
    assert said(h, dm) == ["Will do."]
    (task,) = await service.api.list(Requester.owner())
    assert task.target == Target(
        "discord", {"channel_id": str(dm.id), "user_id": str(OWNER_ID), "is_dm": True}
    )
    clock.advance(2 * 3600)
    await service.tick_once()
    assert said(h, dm) == [
        "Will do.",
        "⏰ Reminder: call the dentist",
    ]
    _, history = await prompt_view(h.memory, f"dm-{OWNER_ID}")
    assert history[-1] == {"role": "assistant", "content": "⏰ Reminder: call the dentist"}
    await service.stop(grace=0)


async def test_discord_prompt_from_a_thread_reports_in_that_thread(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    h = await make_harness({"reply_in_threads": True})
    service, clock = await with_scheduler(h)
    llm_server.script(
        schedule_call(text="summarize the thread", kind="prompt", after="1h"),
        Reply(content="Scheduled."),
        Reply(content="Summary: we planned the week."),  # the scheduled turn
    )
    await h.say(f"{h.mention()} in an hour, summarize this", h.friend)
    await h.settle()
    (thread,) = h.guild.threads
    clock.advance(3600)
    await service.tick_once()
    posted = said(h, thread)
    assert posted == [
        "Scheduled.",
        "🗓️ Task #1: summarize the thread\nSummary: we planned the week.",
    ]
    assert h.bot_messages(h.channel) == []
    (task,) = await service.api.list(Requester.owner(), include_finished=True)
    assert task.creator == str(FRIEND_ID) and task.scope == f"user:{FRIEND_ID}"
    await service.stop(grace=0)


async def test_discord_opens_the_dm_when_needed_and_falls_back_to_it_when_a_channel_is_gone(
    make_harness: Callable[..., Any],
) -> None:
    h = await make_harness()
    service, clock = await with_scheduler(h)
    assert h.friend._user.dm_channel is None  # the bot has no DM with them yet
    friend = Requester(str(FRIEND_ID), f"user:{FRIEND_ID}", "discord", None,
                       Target("discord", {"user_id": str(FRIEND_ID), "is_dm": True}))  # fmt: skip
    await service.api.add(TaskRequest("stretch your legs", after="1h"), friend)
    gone = Requester(str(FRIEND_ID), f"user:{FRIEND_ID}", "discord", None,
                     Target("discord", {"channel_id": "4242", "user_id": str(FRIEND_ID),
                                        "is_dm": False}))  # fmt: skip
    await service.api.add(TaskRequest("drink water", after="1h"), gone)
    clock.advance(3600)
    await service.tick_once()
    dm = await h.dm_channel(h.friend)
    assert [m["content"] for m in h.bot_messages(dm)] == [
        "⏰ Reminder: stretch your legs",
        "-# (sent here: the channel it was asked in is gone or closed to me)\n"
        "⏰ Reminder: drink water",
    ]
    assert await asyncio.to_thread(service.store.pending_deliveries) == []
    await service.stop(grace=0)


async def test_discord_a_cached_category_is_no_destination_and_costs_no_fetch(
    make_harness: Callable[..., Any],
) -> None:
    h = await make_harness()
    category = backend.make_category_channel("Projects", h.guild)  # cached, takes no messages
    fetched: list[int] = []

    async def on_get_channel(channel_id: int) -> None:
        fetched.append(channel_id)

    callbacks.set_callback(on_get_channel, "get_channel")
    try:
        address = {"channel_id": str(category.id), "user_id": str(OWNER_ID), "is_dm": False}
        place = await destination(h.bot, address)
    finally:
        callbacks.remove_callback("get_channel")
    assert place is not None and place.note == MOVED_NOTE  # the owner's DM instead
    assert place.conversation == await h.dm_channel(h.owner)
    assert fetched == []  # the cache answered: no GET /channels/{id}


async def test_discord_strangers_may_set_plain_reminders_only_when_allowed(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    h = await make_harness({"strangers_can_chat": True}, scheduler={"strangers": "reminders"})
    service, clock = await with_scheduler(h)
    llm_server.script(
        schedule_call(text="run a scan", kind="prompt", after="1h"),
        Reply(tool_calls=[{"name": "echo", "arguments": {"text": "hi"}}]),
        schedule_call(text="tea time", after="1h"),
        Reply(content="Reminder set."),
    )
    dm = await h.dm_channel(h.stranger)
    await h.say("scan my stuff in an hour, then remind me about tea", h.stranger, channel=dm)
    await h.settle()
    request = llm_server.requests[0]
    assert [t["function"]["name"] for t in request["tools"]] == [
        "schedule_task",
        "list_tasks",
        "cancel_task",
    ]  # only the guest tools are offered to a stranger
    results = [m["content"] for m in llm_server.requests[3]["messages"] if m["role"] == "tool"]
    assert "you can set plain reminders" in results[0]
    assert (
        "Unknown tool 'echo'. Available tools: cancel_task, list_tasks, schedule_task"
        in (results[1])
    )
    assert "Scheduled #1 reminder" in results[2]
    clock.advance(3600)
    await service.tick_once()
    assert said(h, dm)[-1] == "⏰ Reminder: tea time"
    (task,) = await service.api.list(Requester.owner(), include_finished=True)
    assert task.creator == str(STRANGER_ID)
    await service.stop(grace=0)
