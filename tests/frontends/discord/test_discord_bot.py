"""The real LunaBot driven by dpytest, answering through the real Agent and scripted LLM."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from luna.frontends.channels.following import Following
from luna.tools.registry import ToolContext
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.discord.conftest import FRIEND_ID, OWNER_ID, STRANGER_ID
from tests.history import prompt_view


def user_text(request: dict[str, Any]) -> str:
    """The current user message of an LLM request, without Luna's context block."""
    content = [m for m in request["messages"] if m["role"] == "user"][-1]["content"]
    return content.split("\n\n<context>")[0]


async def test_bot_answers_dm_in_dm_session(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    h = await make_harness()
    llm_server.script(Reply(content="Hi owner!"))
    dm = await h.dm_channel(h.owner)
    await h.say("hello luna", h.owner, channel=dm)
    await h.settle()
    assert [m["content"] for m in h.bot_messages(dm)] == ["Hi owner!"]
    assert user_text(llm_server.requests[0]) == "hello luna"
    _, history = await prompt_view(h.memory, f"dm-{OWNER_ID}")
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert await h.memory.session_scope(f"dm-{OWNER_ID}") == "owner"
    assert h.typing, "typing indicator was never sent"
    intents = h.bot.intents
    assert intents.members and intents.message_content and intents.dm_messages and intents.guilds


async def test_bot_mention_is_stripped_and_uses_channel_session(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    h = await make_harness({"reply_in_threads": False})
    llm_server.script(Reply(content="It is noon."))
    await h.say(f"{h.mention()} what time is it?", h.owner)
    await h.say("no mention, not for me", h.owner)
    await h.settle()
    assert len(llm_server.requests) == 1
    assert user_text(llm_server.requests[0]) == "what time is it?"
    assert [m["content"] for m in h.bot_messages(h.channel)] == ["It is noon."]
    _, history = await prompt_view(h.memory, f"ch-{h.channel.id}-{OWNER_ID}")
    assert history[0]["content"].startswith("what time is it?")


async def test_bot_mention_opens_thread_and_follow_ups_need_no_mention(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    h = await make_harness({"reply_in_threads": True})
    llm_server.script(Reply(content="Let's talk here."), Reply(content="Sure, more."))
    await h.say(f"{h.mention()} plan my week", h.owner)
    await h.settle()
    threads = h.guild.threads
    assert len(threads) == 1 and threads[0].parent_id == h.channel.id
    thread = threads[0]
    assert thread.name == "plan my week"
    assert h.bot_messages(h.channel) == []  # the answer went into the thread
    assert [m["content"] for m in h.bot_messages(thread)] == ["Let's talk here."]
    await h.say("and the weekend too", h.owner, channel=thread)
    await h.settle()
    assert [m["content"] for m in h.bot_messages(thread)] == ["Let's talk here.", "Sure, more."]
    _, history = await prompt_view(h.memory, f"thread-{thread.id}")
    assert [m["role"] for m in history] == ["user", "assistant", "user", "assistant"]


async def test_bot_foreign_thread_needs_a_mention_once(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    from tests.frontends.discord.conftest import backend, factories

    h = await make_harness()
    data = {
        "id": factories.make_id(),
        "guild_id": h.guild.id,
        "parent_id": h.channel.id,
        "owner_id": FRIEND_ID,
        "name": "friend's thread",
        "type": 11,
        "message_count": 0,
        "member_count": 1,
        "rate_limit_per_user": 0,
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": 60,
            "archive_timestamp": "2026-01-01T00:00:00+00:00",
            "locked": False,
        },
    }
    backend.get_state().parse_thread_create(data)
    thread = h.guild.get_thread(data["id"])
    llm_server.script(Reply(content="joined"), Reply(content="still here"))
    await h.say("talking among ourselves", h.friend, channel=thread)
    await h.settle(turns=0)
    assert llm_server.requests == []
    await h.say(f"{h.mention()} help us", h.friend, channel=thread)
    await h.say("thanks", h.friend, channel=thread)
    await h.settle(turns=2)
    assert [user_text(r) for r in llm_server.requests] == ["help us", "thanks"]
    assert [m["content"] for m in h.bot_messages(thread)] == ["joined", "still here"]
    h.bot.following = Following(h.memory.store)  # as after a restart: nothing in memory
    llm_server.script(Reply(content="after a restart"))
    await h.say("one more", h.friend, channel=thread)  # followed: she answered here
    await h.settle(turns=1)
    assert [user_text(r) for r in llm_server.requests][-1] == "one more"
    assert h.bot_messages(thread)[-1]["content"] == "after a restart"


async def test_bot_ignores_strangers_by_default(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    h = await make_harness()
    dm = await h.dm_channel(h.stranger)
    await h.say("hello?", h.stranger, channel=dm)
    await h.say(f"{h.mention()} hello?", h.stranger)
    await h.settle(turns=0)
    assert llm_server.requests == []
    assert h.bot_messages(dm) == [] and h.bot_messages(h.channel) == []
    # The owner's turn runs after theirs would have started: only one turn ran in all.
    owner_dm = await h.dm_channel(h.owner)
    await h.say("anyone there?", h.owner, channel=owner_dm)
    await h.settle()
    assert [user_text(r) for r in llm_server.requests] == ["anyone there?"]


async def test_bot_strangers_chat_without_tools_friends_get_tools(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    h = await make_harness({"strangers_can_chat": True})
    llm_server.script(Reply(content="hello stranger"), Reply(content="hello friend"))
    dm = await h.dm_channel(h.stranger)
    await h.say("hi", h.stranger, channel=dm)
    await h.settle()
    fdm = await h.dm_channel(h.friend)
    await h.say("hi", h.friend, channel=fdm)
    await h.settle()
    stranger_req, friend_req = llm_server.requests
    assert not stranger_req.get("tools")
    assert {t["function"]["name"] for t in friend_req["tools"]} == {"echo", "launch"}
    assert [m["content"] for m in h.bot_messages(dm)] == ["hello stranger"]
    _, history = await prompt_view(h.memory, f"dm-{STRANGER_ID}")
    assert history[0]["content"].startswith("hi")
    assert await h.memory.session_scope(f"dm-{STRANGER_ID}") == f"user:{STRANGER_ID}"
    assert await h.memory.session_scope(f"dm-{FRIEND_ID}") == f"user:{FRIEND_ID}"


async def test_bot_drops_replayed_message_event(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    from tests.frontends.discord.conftest import backend, dpytest

    h = await make_harness()
    llm_server.script(Reply(content="once"), Reply(content="twice?"))
    dm = await h.dm_channel(h.owner)
    await h.say("do it once", h.owner, channel=dm)
    raw = backend._cur_config.messages[dm.id][-1]
    backend.get_state().parse_message_create(dict(raw))  # the gateway replays the event
    await dpytest.run_all_events()
    await h.settle()
    assert len(llm_server.requests) == 1
    assert [m["content"] for m in h.bot_messages(dm)] == ["once"]


async def test_bot_merges_a_burst_into_one_turn(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    h = await make_harness({"burst_window": 1.0})
    llm_server.script(Reply(content="got all three"))
    dm = await h.dm_channel(h.owner)
    for text in ("first", "second", "third"):
        await h.say(text, h.owner, channel=dm)
    await h.settle()
    assert len(llm_server.requests) == 1
    assert user_text(llm_server.requests[0]) == "first\nsecond\nthird"
    assert [m["content"] for m in h.bot_messages(dm)] == ["got all three"]


async def test_bot_runs_one_sessions_turns_in_order(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    h = await make_harness()
    llm_server.script(Reply(content="answer one", delay=0.5), Reply(content="answer two"))
    dm = await h.dm_channel(h.owner)
    await h.say("question one", h.owner, channel=dm)
    await h.say("question two", h.owner, channel=dm)
    await h.settle(turns=2)
    assert [user_text(r) for r in llm_server.requests] == ["question one", "question two"]
    # the second turn saw the whole first turn: it started only after the first one finished
    second = [m["content"] for m in llm_server.requests[1]["messages"] if m["role"] == "assistant"]
    assert second == ["answer one"]
    assert [m["content"] for m in h.bot_messages(dm)] == ["answer one", "answer two"]


async def test_bot_streams_by_editing_one_message(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    from tests.frontends.discord.conftest import dpytest

    h = await make_harness({"edit_interval": 0.2})
    text = " ".join(f"word{i}" for i in range(60))
    llm_server.script(Reply(content=text, chunk_size=8, chunk_delay=0.02))
    dm = await h.dm_channel(h.owner)
    await h.say("stream please", h.owner, channel=dm)
    await h.settle()
    msgs = h.bot_messages(dm)
    assert len(msgs) == 1 and msgs[0]["content"] == text
    first_sent = dpytest.get_message()
    assert first_sent.id == int(msgs[0]["id"])
    assert first_sent.content != text and text.startswith(first_sent.content)  # a partial
    assert [c for mid, c in h.edits if mid == first_sent.id][-1] == text
    assert dpytest.sent_queue.empty()  # no second message was sent


async def test_bot_throttles_edits(make_harness: Callable[..., Any], llm_server: FakeLLMServer):
    from tests.frontends.discord.conftest import dpytest

    h = await make_harness({"edit_interval": 60.0})
    text = "x" * 10 + " streamed slowly" * 10
    llm_server.script(Reply(content=text, chunk_size=4, chunk_delay=0.01))
    dm = await h.dm_channel(h.owner)
    await h.say("stream please", h.owner, channel=dm)
    await h.settle()
    first_sent = dpytest.get_message()
    assert dpytest.sent_queue.empty()
    # ~40 deltas, but within one edit interval: one send (first delta) + the final edit
    assert [c for _mid, c in h.edits] == [text]
    assert h.bot_messages(dm)[0]["content"] == text and first_sent.content != text


async def test_bot_splits_long_reply_into_several_messages(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    h = await make_harness()
    paragraphs = [f"Paragraph {i}. " + "lorem ipsum " * 70 for i in range(6)]
    text = "\n\n".join(p.strip() for p in paragraphs)
    llm_server.script(Reply(content=text, chunk_size=500))
    dm = await h.dm_channel(h.owner)
    await h.say("write a lot", h.owner, channel=dm)
    await h.settle()
    contents = [m["content"] for m in h.bot_messages(dm)]
    assert len(contents) == 3 and all(len(c) <= 2000 for c in contents)
    assert "\n\n".join(contents) == text


async def test_bot_tool_activity_is_one_edited_status_line(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    h = await make_harness({"edit_interval": 0.2})
    llm_server.script(
        Reply(
            tool_calls=[
                {"name": "echo", "arguments": '{"text": "a"}'},
                {"name": "echo", "arguments": '{"text": "b"}'},
            ]
        ),
        Reply(tool_calls=[{"name": "echo", "arguments": '{"text": "c"}'}]),
        Reply(content="All echoed."),
    )
    dm = await h.dm_channel(h.owner)
    await h.say("echo three times", h.owner, channel=dm)
    await h.settle()
    contents = [m["content"] for m in h.bot_messages(dm)]
    assert contents == ["-# 🔧 used `echo` ×3", "All echoed."]
    status_id = int(h.bot_messages(dm)[0]["id"])
    assert any(mid == status_id for mid, _ in h.edits), "status line was never edited"


async def test_bot_llm_failure_is_one_short_line(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    h = await make_harness()
    llm_server.script(Reply(status=500, error_body={"error": {"message": "boom\nTraceback..."}}))
    dm = await h.dm_channel(h.owner)
    await h.say("hi", h.owner, channel=dm)
    await h.settle()
    (msg,) = h.bot_messages(dm)
    assert msg["content"].startswith("⚠️ ")
    assert "\n" not in msg["content"] and "Traceback" not in msg["content"]
    assert len(msg["content"]) < 320


async def test_bot_survives_forbidden_channel(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    import discord

    from tests.frontends.discord.conftest import backend

    h = await make_harness({"reply_in_threads": False})
    me = h.guild.get_member(h.bot.user.id)
    # (dpytest's per-channel overwrites use a type format discord.py 2 ignores; use the role)
    perms = discord.Permissions(h.guild.default_role.permissions.value)
    perms.send_messages = False
    backend.update_role(h.guild.default_role, permissions=perms.value)
    assert not h.channel.permissions_for(me).send_messages
    llm_server.script(Reply(content="nobody sees this"), Reply(content="but this works"))
    await h.say(f"{h.mention()} hello", h.owner)
    await h.settle()
    assert h.bot_messages(h.channel) == []
    dm = await h.dm_channel(h.owner)
    await h.say("still alive?", h.owner, channel=dm)
    await h.settle()
    assert [m["content"] for m in h.bot_messages(dm)] == ["but this works"]


async def test_bot_long_stream_previews_stay_under_limit(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    h = await make_harness({"edit_interval": 0.2})
    text = " ".join(f"token{i:04d}" for i in range(400))  # ~4,000 characters
    llm_server.script(Reply(content=text, chunk_size=200, chunk_delay=0.01))
    dm = await h.dm_channel(h.owner)
    await h.say("long stream", h.owner, channel=dm)
    await h.settle()
    assert h.edits and all(len(c) <= 2000 for _mid, c in h.edits)
    contents = [m["content"] for m in h.bot_messages(dm)]
    assert len(contents) == 3 and " ".join(contents) == text


async def test_bot_rate_limited_edits_do_not_break_the_reply(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer, monkeypatch: Any
):
    import sys

    import discord

    from tests.frontends.discord.conftest import backend

    original = backend.FakeHttp.edit_message
    failures = {"left": 2}

    async def edit_message(http: Any, channel_id: int, message_id: int, **fields: Any) -> Any:
        # dpytest finds the edited Message as ``self`` in its caller's frame: keep it there.
        self = sys._getframe(1).f_locals["self"]  # noqa: F841
        if failures["left"] > 0:
            failures["left"] -= 1
            raise discord.HTTPException(backend.FakeRequest(429, "Too Many Requests"), "slow down")
        return await original(http, channel_id, message_id, **fields)

    monkeypatch.setattr(backend.FakeHttp, "edit_message", edit_message)
    h = await make_harness({"edit_interval": 0.2})
    llm_server.script(
        Reply(tool_calls=[{"name": "echo", "arguments": '{"text": "a"}'}]),
        Reply(content="Final answer after retries.", chunk_delay=0.05),
    )
    dm = await h.dm_channel(h.owner)
    await h.say("go", h.owner, channel=dm)
    await h.settle()
    assert failures["left"] == 0
    contents = [m["content"] for m in h.bot_messages(dm)]
    assert len(contents) == 2 and contents[0].startswith("-# 🔧")
    assert contents[1] == "Final answer after retries."


async def test_bot_failed_final_edit_still_delivers_the_whole_reply(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer, monkeypatch: Any
):
    import sys

    import discord

    from tests.frontends.discord.conftest import backend

    async def edit_message(http: Any, channel_id: int, message_id: int, **fields: Any) -> Any:
        self = sys._getframe(1).f_locals["self"]  # noqa: F841 - dpytest's frame lookup
        raise discord.HTTPException(backend.FakeRequest(500, "Internal Server Error"), "down")

    monkeypatch.setattr(backend.FakeHttp, "edit_message", edit_message)
    h = await make_harness({"edit_interval": 0.2})
    text = " ".join(f"part{i}" for i in range(40))
    llm_server.script(Reply(content=text, chunk_size=10, chunk_delay=0.02))
    dm = await h.dm_channel(h.owner)
    await h.say("answer slowly", h.owner, channel=dm)
    await h.settle()
    contents = [m["content"] for m in h.bot_messages(dm)]
    assert contents[-1] == text, contents  # every edit failed: the answer came as a new message
    assert len(contents) == 2 and text.startswith(contents[0]) and contents[0] != text


async def test_bot_status_line_shows_a_long_calls_progress(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    # A long call's progress (an MCP server's notifications/progress, as the agent emits it)
    # shows in the one status line, as the REPL and the page show it.
    from discord.ext.test import callbacks

    h = await make_harness({"edit_interval": 0.2})

    @h.agent.registry.tool(level="allow")
    async def survey(*, ctx: ToolContext) -> str:
        """Run a long survey."""
        assert ctx.on_progress is not None
        ctx.on_progress("survey: 50%")
        await asyncio.sleep(1.0)  # several edit intervals: the line is shown meanwhile
        return "surveyed"

    sent: list[str] = []

    async def on_send(message: Any) -> None:
        sent.append(message.content)

    callbacks.set_callback(on_send, "send_message")
    llm_server.script(
        Reply(tool_calls=[{"name": "survey", "arguments": "{}"}]), Reply(content="Surveyed.")
    )
    try:
        dm = await h.dm_channel(h.owner)
        await h.say("survey it", h.owner, channel=dm)
        await h.settle()
    finally:
        callbacks.remove_callback("send_message")
    shown = sent + [text for _, text in h.edits]
    assert any("running `survey`… · survey: 50%" in text for text in shown), shown
    assert [m["content"] for m in h.bot_messages(dm)] == ["-# 🔧 used `survey`", "Surveyed."]
