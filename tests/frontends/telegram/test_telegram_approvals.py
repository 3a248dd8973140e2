"""Owner approvals on Telegram (an inline keyboard), and scheduled results delivered to the
chat that asked, through the real front-end and the loopback Bot API."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

from luna.scheduler.clock import ManualClock
from luna.scheduler.model import Requester, Target
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.telegram_server import FakeTelegram
from tests.frontends.telegram.conftest import FRIEND, GROUP, OWNER

LAUNCH = Reply(tool_calls=[{"name": "launch", "arguments": '{"target": "rocket"}'}])


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def said(telegram: FakeTelegram, chat_id: int) -> list[str]:
    """The bot's messages in a chat without its tool status line."""
    return [t for t in telegram.shown(chat_id) if not t.startswith("🔧")]


def prompt_of(telegram: FakeTelegram, chat_id: int) -> Any:
    return next((m for m in telegram.bot_messages(chat_id) if m.reply_markup), None)


async def test_telegram_approval_by_someone_else_does_not_count(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    await start_luna()
    llm_server.script(LAUNCH, Reply(content="Launched."))
    telegram.mention(FRIEND, "launch the rocket", chat=GROUP)
    prompt = await telegram.wait_for(lambda: prompt_of(telegram, GROUP["id"]))
    assert "May I run launch?" in prompt.text and "rocket" in prompt.text
    buttons = prompt.reply_markup["inline_keyboard"][0]
    assert [b["callback_data"] for b in buttons] == ["luna:yes", "luna:no"]
    telegram.press(FRIEND, prompt.message_id, "luna:yes")  # the friend may not approve
    await telegram.wait_for(lambda: telegram.called("answerCallbackQuery"))
    (refusal,) = telegram.called("answerCallbackQuery")
    assert refusal["text"] == "Only the owner can answer this." and refusal["show_alert"]
    assert len(llm_server.requests) == 1  # still waiting for the owner
    telegram.press(OWNER, prompt.message_id, "luna:yes")
    await telegram.wait_for(lambda: "Launched." in telegram.shown(GROUP["id"]))
    assert any("launched rocket" in r for r in tool_results(llm_server.requests[1]))
    assert "🔐 launch: ✅ allowed" in telegram.shown(GROUP["id"])
    assert telegram.called("answerCallbackQuery")[1]["text"] == "Done."


async def test_telegram_owner_can_deny_and_a_late_press_is_told_it_is_closed(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    await start_luna()
    llm_server.script(LAUNCH, Reply(content="Not launched."))
    telegram.message(OWNER, "launch it")
    prompt = await telegram.wait_for(lambda: prompt_of(telegram, OWNER))
    telegram.press(OWNER, prompt.message_id, "luna:no")
    await telegram.wait_for(lambda: "Not launched." in telegram.shown(OWNER))
    assert "declined" in tool_results(llm_server.requests[1])[0]
    telegram.press(OWNER, prompt.message_id, "luna:yes")
    await telegram.wait_for(lambda: len(telegram.called("answerCallbackQuery")) == 2)
    assert telegram.called("answerCallbackQuery")[1]["text"] == "This question is no longer open."


async def test_telegram_reminder_is_delivered_to_the_chat_that_asked(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    clock = ManualClock(dt.datetime(2026, 12, 1, 7, 0, tzinfo=dt.UTC))
    luna = await start_luna(clock=clock)
    assert luna.scheduler is not None
    await telegram.wait_for(lambda: luna.scheduler.router.frontends == ["telegram"])
    call = {"name": "schedule_task", "arguments": {"text": "water the plants", "after": "1h"}}
    llm_server.script(Reply(tool_calls=[call]), Reply(content="Will do."))
    telegram.mention(FRIEND, "remind me in an hour to water the plants", chat=GROUP, thread_id=9)
    await telegram.wait_for(lambda: said(telegram, GROUP["id"]) == ["Will do."])
    (task,) = await luna.scheduler.api.list(Requester.owner(), include_finished=True)
    assert task.creator == f"telegram:{FRIEND}" and task.scope == f"user:telegram:{FRIEND}"
    assert task.target == Target(
        "telegram",
        {"chat_id": str(GROUP["id"]), "thread_id": "9", "user_id": f"telegram:{FRIEND}"},
    )
    clock.advance(3600)
    await luna.scheduler.tick_once()
    await telegram.wait_for(
        lambda: said(telegram, GROUP["id"])[-1:] == ["⏰ Reminder: water the plants"]
    )
    reminder = telegram.bot_messages(GROUP["id"])[-1]
    assert reminder.text == "⏰ Reminder: water the plants" and reminder.thread_id == 9
    history = await luna.history(f"tg-{GROUP['id']}-t9")
    assert history[-1] == ("assistant", "⏰ Reminder: water the plants")
