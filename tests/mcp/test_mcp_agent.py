"""An MCP tool call round trip through the real agent loop, driven by the scripted LLM."""

from __future__ import annotations

import json
from collections.abc import Callable

from mcp_helpers import echo_entry

from luna.agent import Agent
from luna.config import Config
from luna.llm import LLMClient
from luna.memory import Memory
from luna.messages import InboundMessage, ToolFinished, ToolStarted, TurnDone
from luna.tools import catalog
from tests.fakes.llm_server import FakeLLMServer, Reply


async def test_mcp_tools_round_trip_through_agent_loop(
    mcp_cfg: Callable[..., Config], mcp_manager, llm_server: FakeLLMServer
) -> None:
    cfg = mcp_cfg(
        {"echo": echo_entry(), "time": {"command": "python", "args": ["-m", "mcp_server_time"]}}
    )
    manager, registry = mcp_manager(cfg)
    await manager.start()
    assert await manager.wait_ready(60), "MCP servers did not finish starting"
    assert {s.state for s in manager.status()} == {"running"}, manager.status()
    memory = Memory(cfg.memory)
    await memory.open(background=False)
    llm = LLMClient(cfg.llm)
    try:
        agent = Agent(cfg, llm, memory, registry)
        llm_server.script(
            Reply(
                tool_calls=[
                    {"name": "echo__add", "arguments": '{"a": 40, "b": 2}', "id": "c1"},
                    {
                        "name": "time__get_current_time",
                        "arguments": '{"timezone": "UTC"}',
                        "id": "c2",
                    },
                ]
            ),
            Reply(content="40 + 2 is 42, and I checked the clock."),
        )
        msg = InboundMessage(session_id="mcp", text="add 40 and 2, and what time is it?")
        events = [e async for e in agent.run_turn(msg)]
    finally:
        await llm.close()
        await memory.close()

    offered = {t["function"]["name"] for t in llm_server.requests[0]["tools"]}
    assert {"echo__add", "echo__echo", "time__get_current_time"} <= offered
    started = [e.name for e in events if isinstance(e, ToolStarted)]
    finished = {e.name: e for e in events if isinstance(e, ToolFinished)}
    assert started == ["echo__add", "time__get_current_time"]
    assert not finished["echo__add"].is_error and not finished["time__get_current_time"].is_error
    assert isinstance(events[-1], TurnDone)
    assert events[-1].reply == "40 + 2 is 42, and I checked the clock."
    tool_msgs = {
        m["tool_call_id"]: m["content"]
        for m in llm_server.requests[1]["messages"]
        if m["role"] == "tool"
    }
    assert "42" in tool_msgs["c1"] and "<untrusted" in tool_msgs["c1"]
    body = tool_msgs["c2"].split("\n", 1)[1].rsplit("\n", 1)[0]  # inside the untrusted tags
    assert json.loads(body)["timezone"] == "UTC"


async def test_mcp_catalog_tools_reached_through_use_tool_in_agent_loop(
    mcp_cfg: Callable[..., Config], mcp_manager, llm_server: FakeLLMServer
) -> None:
    cfg = mcp_cfg({"echo": echo_entry(expose="catalog")})
    manager, registry = mcp_manager(cfg)
    catalog.register(registry, cfg)
    await manager.start()
    assert await manager.wait_ready(60), "MCP server did not finish starting"
    memory = Memory(cfg.memory)
    await memory.open(background=False)
    llm = LLMClient(cfg.llm)
    try:
        agent = Agent(cfg, llm, memory, registry)
        llm_server.script(
            Reply(tool_calls=[{"name": "list_available_tools", "arguments": '{"query": "add"}'}]),
            Reply(
                tool_calls=[
                    {
                        "name": "use_tool",
                        "arguments": json.dumps(
                            {"name": "echo__add", "arguments": {"a": 40, "b": 2}}
                        ),
                    }
                ]
            ),
            Reply(content="It is 42."),
        )
        msg = InboundMessage(session_id="cat", text="add 40 and 2 with an extra tool")
        events = [e async for e in agent.run_turn(msg)]
    finally:
        await llm.close()
        await memory.close()

    offered = {t["function"]["name"] for t in llm_server.requests[0]["tools"]}
    assert {"list_available_tools", "use_tool"} <= offered
    assert not {n for n in offered if n.startswith("echo__")}  # the catalog stays out of the prompt
    listing = llm_server.requests[1]["messages"][-1]["content"]
    assert "echo__add(a, b)" in listing
    used = llm_server.requests[2]["messages"][-1]
    assert used["role"] == "tool" and "42" in used["content"]
    assert not any(e.is_error for e in events if isinstance(e, ToolFinished))
    assert isinstance(events[-1], TurnDone) and events[-1].reply == "It is 42."
