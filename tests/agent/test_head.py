"""The session head (luna.agent.head) in the real agent loop: fixed, kept, rebuilt at a cut.

Real Agent, Memory (SQLite), registry and MCP servers (subprocesses); the scripted LLM server.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from luna.agent import Agent
from luna.config import Config
from luna.llm import LLMClient
from luna.mcp.manager import MCPManager
from luna.memory import Memory
from luna.messages import InboundMessage, Status, TurnDone
from luna.tools import catalog
from luna.tools.registry import ToolRegistry
from tests.fakes.llm_server import FakeLLMServer
from tests.fakes.tools import echo_registry

SERVERS = Path(__file__).resolve().parents[1] / "mcp" / "servers"


@pytest.fixture
async def parts(
    luna_config: Callable[..., Config], tmp_path: Path
) -> AsyncIterator[Callable[..., Any]]:
    """``make(servers=None) -> (agent, registry, memory)``; everything is closed afterwards."""
    closing: list[Any] = []

    async def make(servers: dict[str, Any] | None = None) -> tuple[Agent, ToolRegistry, Memory]:
        (tmp_path / "mcp_servers.json").write_text(json.dumps({"servers": servers or {}}))
        cfg = luna_config({"mcp": {"servers_file": str(tmp_path / "mcp_servers.json")}})
        memory = Memory(cfg.memory)
        await memory.open(background=False)
        llm = LLMClient(cfg.llm)
        registry = echo_registry(cfg)
        catalog.register(registry, cfg)  # as build_registry does
        manager = MCPManager(cfg, registry)
        closing.extend([manager.stop, llm.close, memory.close])
        await manager.start()
        return Agent(cfg, llm, memory, registry), registry, memory

    yield make
    for close in closing:
        await close()


async def _turn(agent: Agent, text: str, **kw: Any) -> list[Any]:
    events = [e async for e in agent.run_turn(InboundMessage("s", text, **kw))]
    assert isinstance(events[-1], TurnDone), events[-1]
    return events


def _names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


async def test_head_changes_only_at_a_compaction(
    parts: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    agent, registry, memory = await parts()
    await _turn(agent, "one")

    @registry.tool(level="allow")
    async def later() -> str:
        """A tool registered after the session started."""
        return "late"

    await _turn(agent, "two")
    first, second = llm_server.requests
    assert second["tools"] == first["tools"] and "later" not in _names(second)
    assert {"list_available_tools", "use_tool"} <= set(_names(first))  # always declared
    history = await memory.session_messages("s")
    await memory.set_summary("s", "They said one and two.", history[-1].id)  # a compaction
    await _turn(agent, "three")
    third = llm_server.requests[2]
    assert "later" in _names(third)
    assert [cut for cut, _, _ in await memory.session_heads("s")] == [0, history[-1].id]


async def test_head_guest_turn_declares_only_the_guest_tools(
    parts: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    agent, registry, memory = await parts()

    @registry.tool(level="allow", guest=True)
    async def wave() -> str:
        """Wave back (any user)."""
        return "👋"

    await _turn(agent, "hi", allow_tools=False)
    assert _names(llm_server.requests[0]) == ["wave"]
    _, kept = await memory.session_head("s")
    assert kept is not None and "echo" in [t["function"]["name"] for t in kept["tools"]]


async def test_head_with_tools_off_declares_nothing_and_keeps_nothing(
    parts: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    agent, _, memory = await parts()
    agent.tools_enabled = False  # the embedded demo model
    await _turn(agent, "hi")
    assert "tools" not in llm_server.requests[0]
    assert await memory.session_head("s") == (0, None)
    agent.tools_enabled = True  # a real model later: the head starts then
    await _turn(agent, "again")
    assert "echo" in _names(llm_server.requests[1])


async def test_head_first_turn_waits_for_a_hanging_server_only_its_timeout(
    parts: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    hanging = {"command": sys.executable, "args": [str(SERVERS / "hanging_server.py")]}
    failing = {"command": sys.executable, "args": [str(SERVERS / "crashing_server.py")]}
    agent, _, _ = await parts({"hang": {**hanging, "timeout": 1}, "bad": failing})
    started = time.monotonic()
    events = await _turn(agent, "hi")
    waited = time.monotonic() - started
    notes = [e.text for e in events if isinstance(e, Status)]
    assert 1.0 <= waited < 10, waited
    assert any("'hang' is not running (still starting)" in n for n in notes), notes
    assert any("'bad' is not running" in n and "giving up" in n for n in notes), notes
    assert not [n for n in _names(llm_server.requests[0]) if "__" in n]
    await _turn(agent, "again")  # the head is kept: nothing is waited for or said again
    assert llm_server.requests[1]["tools"] == llm_server.requests[0]["tools"]
