"""The Telegram front-end end to end: the real TelegramFrontend, Agent and SQLite memory
against the loopback Bot API server, with the scripted LLM server."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from luna.errors import LunaError
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.telegram_server import BOT_ID, FakeTelegram
from tests.frontends.telegram.conftest import FORUM, FRIEND, GROUP, OWNER, STRANGER


async def test_telegram_private_chat_is_answered_streamed_and_acknowledged(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    luna = await start_luna()
    llm_server.script(Reply(content="Hello **there**, 1 < 2 & fine.", chunk_delay=0.05))
    update = telegram.message(OWNER, "hi Luna")
    await telegram.wait_for(lambda: telegram.shown(OWNER) == ["Hello there, 1 < 2 & fine."])
    (message,) = telegram.bot_messages(OWNER)
    assert message.parse_mode == "HTML" and "<b>there</b>" in message.raw
    assert "1 &lt; 2 &amp; fine" in message.raw
    assert len(message.history) >= 2  # streamed: sent, then edited
    assert telegram.called("sendChatAction")
    assert await luna.history(f"tg-{OWNER}", length=2) == [
        ("user", "hi Luna"),
        ("assistant", "Hello **there**, 1 < 2 & fine."),
    ]
    await telegram.wait_for(lambda: max(telegram.offsets) > update)  # acknowledged
    rows = luna.memory.store.query("SELECT cursor FROM channel_cursors")
    assert rows == [(str(update + 1),)]


async def test_telegram_strangers_are_ignored_and_scopes_are_per_app(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    luna = await start_luna()
    llm_server.script(Reply(content="Hi friend."))
    ignored = telegram.message(STRANGER, "let me in")
    telegram.message(FRIEND, "hello")
    await telegram.wait_for(lambda: telegram.shown(FRIEND) == ["Hi friend."])
    assert telegram.shown(STRANGER) == []
    assert len(llm_server.requests) == 1
    scopes = luna.memory.store.query("SELECT DISTINCT scope FROM messages")
    assert scopes == [(f"user:telegram:{FRIEND}",)]
    await telegram.wait_for(lambda: max(telegram.offsets) > ignored)


async def test_telegram_two_users_in_a_group_each_get_their_own_session(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    luna = await start_luna()
    llm_server.script(Reply(content="Answer one."), Reply(content="Answer two."))
    telegram.message(OWNER, "just chatting, not to the bot", chat=GROUP)
    telegram.mention(OWNER, "what time is it?", chat=GROUP)
    await telegram.wait_for(lambda: telegram.shown(GROUP["id"]) == ["Answer one."])
    (first,) = telegram.bot_messages(GROUP["id"])
    telegram.message(FRIEND, "and for me?", chat=GROUP, reply_to=first.message_id)
    # The final text, not the first streamed edit ("Answer t"), which already makes two.
    await telegram.wait_for(lambda: telegram.shown(GROUP["id"]) == ["Answer one.", "Answer two."])
    assert await luna.history(f"tg-{GROUP['id']}-u{OWNER}", length=2) == [
        ("user", "what time is it?"),
        ("assistant", "Answer one."),
    ]
    assert await luna.history(f"tg-{GROUP['id']}-u{FRIEND}", length=2) == [
        ("user", "and for me?"),
        ("assistant", "Answer two."),
    ]
    assert len(llm_server.requests) == 2  # the unaddressed message started no turn


async def test_telegram_forum_topic_is_its_own_session_and_replies_in_it(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    luna = await start_luna()
    llm_server.script(Reply(content="In the topic."))
    telegram.mention(OWNER, "status?", chat=FORUM, thread_id=77)
    await telegram.wait_for(lambda: telegram.shown(FORUM["id"]) == ["In the topic."])
    (message,) = telegram.bot_messages(FORUM["id"])
    assert message.thread_id == 77
    assert await luna.history(f"tg-{FORUM['id']}-t77", length=2) == [
        ("user", "status?"),
        ("assistant", "In the topic."),
    ]


async def test_telegram_burst_of_thirty_messages_loses_and_repeats_nothing(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    luna = await start_luna({"burst_window": 0.5})
    llm_server.default = Reply(content="Got it.")
    updates = [telegram.message(OWNER, f"message {i}") for i in range(30)]
    await telegram.wait_for(lambda: max(telegram.offsets, default=0) > updates[-1], within=60)
    history = await luna.history(f"tg-{OWNER}")
    said = "\n".join(content for role, content in history if role == "user")
    assert [f"message {i}" for i in range(30)] == said.split("\n")  # each once, in order
    turns = sum(1 for role, _ in history if role == "user")
    assert turns <= 30
    # Every reply's final text (a streamed edit on its way counts as one of them too early).
    # The last turn may still be on its way to the model when the history is read.
    await telegram.wait_for(
        lambda: len(telegram.shown(OWNER)) == turns and set(telegram.shown(OWNER)) == {"Got it."}
    )
    assert turns == len(llm_server.requests)  # one model request per merged turn, none repeated


async def test_telegram_twenty_thousand_characters_arrive_whole_in_parts(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    await start_luna()
    paragraphs = [f"Paragraph {i}: " + "word " * 60 for i in range(66)]
    reply = "\n\n".join(p.strip() for p in paragraphs)
    assert len(reply) >= 20_000
    llm_server.script(Reply(content=reply, chunk_size=500))
    telegram.message(OWNER, "write a lot")
    await telegram.wait_for(
        lambda: "Paragraph 65" in "".join(telegram.shown(OWNER)) and len(telegram.shown(OWNER)) > 4
    )
    await asyncio.sleep(0.5)
    parts = telegram.shown(OWNER)
    assert all(len(p.encode("utf-16-le")) // 2 <= 4096 for p in parts)
    assert "\n\n".join(parts).split() == reply.split()


async def test_telegram_unbalanced_markdown_is_shown_as_typed(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    await start_luna()
    nasty = "**bold never closed, `code too, <b>html</b> & [link](javascript:x) _a"
    llm_server.script(Reply(content=nasty))
    telegram.message(OWNER, "break it")
    await telegram.wait_for(lambda: telegram.shown(OWNER))
    await asyncio.sleep(0.3)
    assert telegram.shown(OWNER) == [nasty]
    assert all(p.get("parse_mode") == "HTML" for p in telegram.called("sendMessage"))


async def test_telegram_refused_formatting_falls_back_to_plain_text(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    await start_luna()
    for method in ("sendMessage", "editMessageText"):  # Telegram refuses every formatted text
        telegram.fault(method, status=400, times=100, when=lambda p: p.get("parse_mode"),
                       description="Bad Request: can't parse entities: bad")  # fmt: skip
    llm_server.script(Reply(content="**Plain** it is, " + "word " * 40, chunk_delay=0.01))
    telegram.message(OWNER, "hello")
    await telegram.wait_for(lambda: telegram.shown(OWNER) and "word" in telegram.shown(OWNER)[0])
    await asyncio.sleep(0.5)
    (message,) = telegram.bot_messages(OWNER)
    assert message.parse_mode is None
    assert message.text == ("**Plain** it is, " + "word " * 40).strip()


async def test_telegram_flood_wait_while_streaming_is_honoured(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    await start_luna()
    telegram.fault("editMessageText", status=429, retry_after=1, times=1,
                   description="Too Many Requests: retry after 1")  # fmt: skip
    text = " ".join(f"w{i}" for i in range(120))
    llm_server.script(Reply(content=text, chunk_size=8, chunk_delay=0.02))
    telegram.message(OWNER, "stream it")
    await telegram.wait_for(lambda: telegram.shown(OWNER) == [text], within=30)
    edits = [p for p in telegram.called("editMessageText")]
    refused_at = edits[0]["_at"]
    later = [p["_at"] for p in edits[1:]] + [p["_at"] for p in telegram.called("sendMessage")[1:]]
    assert all(t >= refused_at + 1.0 for t in later)  # nothing before retry_after passed


async def test_telegram_blocked_chat_costs_only_that_reply(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    await start_luna()
    telegram.blocked.add(FRIEND)
    llm_server.script(Reply(content="You blocked me."), Reply(content="Still here."))
    blocked = telegram.message(FRIEND, "hi")
    await telegram.wait_for(lambda: max(telegram.offsets, default=0) > blocked)
    await telegram.wait_for(lambda: len(llm_server.requests) == 1)
    telegram.message(OWNER, "are you alive?")
    await telegram.wait_for(lambda: telegram.shown(OWNER) == ["Still here."])
    assert telegram.shown(FRIEND) == []


async def test_telegram_bot_messages_are_not_from_the_bot_itself(telegram: FakeTelegram) -> None:
    assert BOT_ID not in (OWNER, FRIEND, STRANGER)


async def test_telegram_timeouts_cost_no_reply(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    await start_luna({"request_timeout": 1.0, "edit_interval": 30})
    telegram.fault("sendChatAction", stall=3.0, status=500, description="late")
    telegram.fault("sendMessage", stall=3.0, status=500, description="late")
    llm_server.script(Reply(content="Made it anyway."))
    telegram.message(OWNER, "slow network?")
    await telegram.wait_for(lambda: telegram.shown(OWNER) == ["Made it anyway."])
    assert len(telegram.called("sendMessage")) == 2  # the first timed out, the final went out


async def test_telegram_message_telegram_finds_too_long_is_halved_not_lost(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    await start_luna({"edit_interval": 30})
    too_long = "Bad Request: message is too long"  # Telegram counts otherwise than Luna
    for method in ("sendMessage", "editMessageText"):
        telegram.fault(method, status=400, times=100, description=too_long,
                       when=lambda p: len(p["text"]) > 3000)  # fmt: skip
    reply = " ".join(f"w{i}" for i in range(800))  # 4,000 characters: fits by Luna's count
    llm_server.script(Reply(content=reply, chunk_size=4000))
    telegram.message(OWNER, "long one")
    await telegram.wait_for(lambda: " ".join(telegram.shown(OWNER)).split() == reply.split())
    await asyncio.sleep(0.3)
    parts = telegram.shown(OWNER)
    assert len(parts) >= 2 and all(len(p) <= 3000 for p in parts)
    assert " ".join(parts).split() == reply.split()  # whole, once


async def test_telegram_unreachable_at_start_is_waited_out(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    telegram.fault("getMe", status=502, times=2, description="Bad Gateway")
    await start_luna()
    llm_server.script(Reply(content="Up now."))
    telegram.message(OWNER, "hello?")
    await telegram.wait_for(lambda: telegram.shown(OWNER) == ["Up now."])
    assert len(telegram.called("getMe")) == 3


async def test_telegram_refused_token_stops_the_front_end_with_one_line(
    start_luna: Callable[..., Any], telegram: FakeTelegram
) -> None:
    luna = await start_luna(token="999:" + "x" * 35)
    with pytest.raises(LunaError, match="Telegram refused TELEGRAM_TOKEN"):
        await asyncio.wait_for(luna.task, 10)
    assert "x" * 35 not in str(luna.task.exception())
