"""Owner approvals for 'ask' tools, through the real bot and Agent."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import discord.ext.test as dpytest

from tests.fakes.llm_server import FakeLLMServer, Reply

LAUNCH = Reply(tool_calls=[{"name": "launch", "arguments": '{"target": "rocket"}'}])


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


async def approval_prompt(h: Any, channel: Any) -> Any:
    """Wait (bounded) until the bot has posted its approval prompt; return it."""

    async def poll() -> Any:
        while True:
            for raw in h.bot_messages(channel):
                if "may I run" in raw["content"]:
                    return await channel.fetch_message(int(raw["id"]))
            await asyncio.sleep(0.02)

    return await asyncio.wait_for(poll(), timeout=20)


async def test_approval_owner_reaction_allows_tool(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    h = await make_harness()
    llm_server.script(LAUNCH, Reply(content="Launched."))
    dm = await h.dm_channel(h.owner)
    await h.say("launch the rocket", h.owner, channel=dm)
    prompt = await approval_prompt(h, dm)
    assert "`launch`" in prompt.content and "rocket" in prompt.content
    await dpytest.add_reaction(h.owner, prompt, "✅")
    await h.settle()
    assert any("launched rocket" in r for r in tool_results(llm_server.requests[1]))
    contents = [m["content"] for m in h.bot_messages(dm)]
    assert "-# 🔐 `launch`: ✅ allowed" in contents
    assert contents[-1] == "Launched."


async def test_approval_owner_can_deny_and_others_do_not_count(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    h = await make_harness({"reply_in_threads": False})
    llm_server.script(LAUNCH, Reply(content="Not launched."))
    await h.say(f"{h.mention()} launch it", h.friend)
    prompt = await approval_prompt(h, h.channel)
    await dpytest.add_reaction(h.friend, prompt, "✅")  # only the owner's vote counts
    await dpytest.add_reaction(h.owner, prompt, "❌")
    await h.settle()
    (result,) = tool_results(llm_server.requests[1])
    assert "declined" in result and "launched rocket" not in result
    assert "-# 🔐 `launch`: ❌ denied" in [m["content"] for m in h.bot_messages(h.channel)]


async def test_approval_timeout_means_deny(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer
):
    h = await make_harness(tools={"approval_timeout": 1.0})
    llm_server.script(LAUNCH, Reply(content="Timed out."))
    dm = await h.dm_channel(h.owner)
    await h.say("launch", h.owner, channel=dm)
    await h.settle()
    (result,) = tool_results(llm_server.requests[1])
    assert "launched rocket" not in result
    contents = [m["content"] for m in h.bot_messages(dm)]
    assert "-# 🔐 `launch`: ⏱️ no answer: denied" in contents
