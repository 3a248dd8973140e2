"""KV-cache reuse on the real llama-server, in tokens: Luna's requests extend what it holds.

The real agent runs a session (tool rounds and new user turns) against the scripted model on
the real server (tests/fakes/scripted_llama.py): scripted words, real rendering and caching.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from luna.agent import Agent
from luna.config import build_config
from luna.llm import LLMClient
from luna.memory import Memory
from luna.messages import InboundMessage, TurnDone
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.scripted_llama import Recorder, Step, on_real_server
from tests.fakes.tools import echo_registry
from tests.real_llama import RealLlama

TURNS = 3


@pytest.fixture
async def session(tmp_path: Path, llm_server: FakeLLMServer) -> AsyncIterator[Callable[..., Any]]:
    closing: list[Any] = []

    async def run(real: RealLlama, policy: str) -> list[Step]:
        recorder = Recorder()
        data = {
            "llm": {"endpoint": llm_server.url, "model": "m", "history_reasoning": policy},
            "memory": {"db_path": str(tmp_path / policy / "luna.db"), "librarian": False},
            "observe": {"log_dir": str(tmp_path / "logs"), "console": False},
            "agent": {"workspace": str(tmp_path / "ws")},
            "mcp": {"servers_file": str(tmp_path / "none.json")},
        }
        cfg = build_config(data, {}, base_dir=tmp_path)
        memory = Memory(cfg.memory)
        await memory.open(background=False)
        llm = LLMClient(cfg.llm)
        closing.extend([llm, memory])
        agent = Agent(cfg, llm, memory, echo_registry(cfg))
        for i in range(TURNS):
            call = {"name": "echo", "arguments": json.dumps({"text": f"x{i}"}), "id": f"c{i}"}
            llm_server.script(
                on_real_server(real, Reply(reasoning=f"I echo {i}.", tool_calls=[call]), recorder),
                on_real_server(real, Reply(reasoning="Done.", content=f"Echoed x{i}."), recorder),
            )
            events = [e async for e in agent.run_turn(InboundMessage("s", f"please echo {i}"))]
            assert isinstance(events[-1], TurnDone), events[-1]
        return recorder.steps

    yield run
    for part in closing:
        await part.close()


def extends(real: RealLlama, step: Step) -> bool:
    """The request's tokens start with every token the server held before it."""
    held = real.tokenize(step.held_before)
    return real.tokenize(step.prompt)[: len(held)] == held


async def test_kv_cache_luna_template_keeps_everything_old_in_the_cache(
    real_llama: Callable[..., RealLlama], session: Callable[..., Any]
) -> None:
    real = real_llama("luna", fresh_server=True)
    steps = await session(real, "keep")
    assert len(steps) == 2 * TURNS
    for step in steps[1:]:
        assert extends(real, step), step.prompt[-300:]
        held = len(real.tokenize(step.held_before))
        # Everything held is reused; only what is new since the last request is prefilled.
        assert step.cached_tokens >= held - 1
        assert step.prefilled_tokens == step.prompt_tokens - step.cached_tokens


async def test_kv_cache_stock_template_drops_old_reasoning_at_each_new_turn(
    real_llama: Callable[..., RealLlama], session: Callable[..., Any]
) -> None:
    real = real_llama("stock", fresh_server=True)
    steps = await session(real, "keep")
    tool_rounds, new_turns = steps[1::2], steps[2::2]
    # Within a turn the reasoning sent back extends the cache ...
    assert all(extends(real, s) for s in tool_rounds)
    # ... but the stock template renders no reasoning before the last user message, so each
    # new user turn re-prefills the previous turn (what Luna's template fixes).
    assert new_turns and not any(extends(real, s) for s in new_turns)


async def test_kv_cache_without_reasoning_every_tool_round_reprefills(
    real_llama: Callable[..., RealLlama], session: Callable[..., Any]
) -> None:
    real = real_llama("stock", fresh_server=True)
    steps = await session(real, "drop")
    assert not any(extends(real, s) for s in steps[1::2])  # the old behaviour, measured
