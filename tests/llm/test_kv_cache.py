"""KV-cache reuse on the real llama-server, in tokens, with the production model's rules.

The real agent runs a session against the scripted model on the real server
(tests/fakes/scripted_llama.py): scripted words, real rendering and caching. The server runs
without ``--swa-full`` (tests/real_llama.py): like Qwen3.5's recurrent layers, Gemma's
sliding-window layers then cannot roll back, and a request that does not extend what the slot
holds gets only a context checkpoint back, or starts over. One case keeps ``--swa-full``,
which makes every rollback free, for comparison.

The long session has 10 turns with tool rounds through a real MCP server, that server killed
and restarted in the middle, and a compaction by the real librarian.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from luna.agent import Agent
from luna.config import build_config
from luna.llm import LLMClient
from luna.mcp.manager import MCPManager
from luna.memory import Memory
from luna.memory.librarian import Librarian
from luna.messages import InboundMessage, TurnDone
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.scripted_llama import Recorder, Step, on_real_server
from tests.fakes.tools import echo_registry
from tests.real_llama import RealLlama

ECHO = Path(__file__).resolve().parents[1] / "mcp" / "servers" / "echo_server.py"
TURNS = 10
CRASH_AT = 4  # this turn's tool call kills the MCP server; the next one's restarts it
SUMMARY = {"summary": "The user asked for echoes of x0 to x5; each was echoed.", "facts": []}
RESTORED = re.compile(r"restored context checkpoint \(.*n_past = (\d+),")


@dataclass
class Session:
    steps: list[Step]
    compacted_at: int  # index of the first step after the compaction


def _call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "arguments": json.dumps(arguments), "id": call_id}


@pytest.fixture
async def session(tmp_path: Path, llm_server: FakeLLMServer) -> AsyncIterator[Callable[..., Any]]:
    closing: list[Callable[[], Any]] = []  # coroutines
    stopping: list[Callable[[], None]] = []

    async def run(
        real: RealLlama, policy: str = "keep", turns: int = TURNS, compact: bool = True
    ) -> Session:
        recorder = Recorder()
        base = tmp_path / f"{policy}-{real.port}"
        (base / "mcp.json").parent.mkdir(parents=True)
        server = {"command": sys.executable, "args": [str(ECHO)], "timeout": 30}
        (base / "mcp.json").write_text(json.dumps({"servers": {"echo": server}}))
        data = {
            "llm": {"endpoint": llm_server.url, "model": "m", "history_reasoning": policy},
            "memory": {
                "db_path": str(base / "luna.db"),
                # once, after the 6th turn (4 messages a turn)
                "compact_every_messages": 24 if compact else 100_000,
                "retain_messages": 4,
            },
            "observe": {"log_dir": str(base / "logs"), "console": False},
            "agent": {"workspace": str(base / "ws")},
            "mcp": {"servers_file": str(base / "mcp.json")},
        }
        cfg = build_config(data, {}, base_dir=base)
        memory = Memory(cfg.memory)
        await memory.open(background=False)
        llm = LLMClient(cfg.llm)
        registry = echo_registry(cfg)
        mcp = MCPManager(cfg, registry)
        summarizer = FakeLLMServer().start()  # the librarian's model, apart from the session's
        stopping.append(summarizer.stop)
        summarizer.default = Reply(content=json.dumps(SUMMARY))
        bg_cfg = build_config({"llm": {"endpoint": summarizer.url}}, {}, base_dir=base)
        background = LLMClient(bg_cfg.llm)
        closing.extend([mcp.stop, llm.close, background.close, memory.close])
        await mcp.start()
        librarian = Librarian(memory, background, cfg)
        agent = Agent(cfg, llm, memory, registry, librarian)
        compacted_at = len(recorder.steps) + 2 * turns  # past the end: no compaction
        for i in range(turns):
            tool = "echo__crash" if i == CRASH_AT else ("echo__echo" if i % 2 else "echo")
            args = {} if tool == "echo__crash" else {"text": f"x{i}"}
            llm_server.script(
                on_real_server(
                    real,
                    Reply(reasoning=f"I echo {i}.", tool_calls=[_call(tool, args, f"c{i}")]),
                    recorder,
                ),
                on_real_server(real, Reply(reasoning="Done.", content=f"Echoed x{i}."), recorder),
            )
            events = [e async for e in agent.run_turn(InboundMessage("s", f"please echo {i}"))]
            assert isinstance(events[-1], TurnDone), events[-1]
            summary_before = (await memory.summary("s"))[0]
            await librarian.wait_idle()
            if summary_before is None and (await memory.summary("s"))[0] is not None:
                compacted_at = len(recorder.steps)
        assert compacted_at < len(recorder.steps) or not compact, "no compaction happened"
        requests = llm_server.requests[-len(recorder.steps) :]
        assert all(r["tools"] == requests[0]["tools"] for r in requests[:compacted_at])
        if turns > CRASH_AT:
            assert mcp.status()[0].restarts >= 1  # the crash really restarted the server
        return Session(recorder.steps, compacted_at)

    yield run
    for close in closing:
        await close()
    for stop in stopping:
        stop()


def _held(real: RealLlama, step: Step) -> int:
    return len(real.tokenize(step.held_before)) if step.held_before else 0


def extends(real: RealLlama, step: Step) -> bool:
    """The request's tokens start with every token the server held before it."""
    held = real.tokenize(step.held_before)
    return real.tokenize(step.prompt)[: len(held)] == held


def old_prefilled(real: RealLlama, step: Step) -> int:
    """Tokens the server had held and prefilled again for this request."""
    return max(0, _held(real, step) - step.cached_tokens)


def checkpoint_restores(real: RealLlama) -> list[int]:
    """``n_past`` of every context checkpoint the server restored, from its own log."""
    return [int(n) for n in RESTORED.findall(real.log_path.read_text(errors="replace"))]


async def test_kv_cache_ten_turns_with_a_crash_prefill_nothing_old_but_at_the_compaction(
    real_llama: Callable[..., RealLlama], session: Callable[..., Any]
) -> None:
    real = real_llama("luna", fresh_server=True)
    run = await session(real)
    steps, compacted = run.steps, run.compacted_at
    assert len(steps) == 2 * TURNS
    restores = checkpoint_restores(real)
    for i, step in enumerate(steps[1:], start=1):
        if i == compacted:
            continue  # the summary changed the system message: a new head, by design
        assert extends(real, step), f"step {i + 1}: {step.prompt[-300:]}"
        old = old_prefilled(real, step)
        # llama.cpp restores a checkpoint even for a request that extends the slot while the
        # sequence still fits in the sliding window (its threshold is clamped at position 0),
        # and a restored checkpoint gives back one token less than it holds: a few tokens,
        # which its log names. Anything else prefilled again would be Luna's doing.
        if old:
            assert old <= 8 and step.cached_tokens in restores, (i, old, restores)
    # After the compaction the new head is read in once; then requests extend it again.
    assert steps[compacted].cached_tokens < _held(real, steps[compacted])
    assert all(old_prefilled(real, s) <= 8 for s in steps[compacted + 1 :])
    total = sum(old_prefilled(real, s) for j, s in enumerate(steps) if j != compacted)
    print(f"\nwithout --swa-full: {total} old tokens prefilled again outside the compaction")


async def test_kv_cache_with_swa_full_every_rollback_is_free(
    real_llama: Callable[..., RealLlama], session: Callable[..., Any]
) -> None:
    # The comparison case: --swa-full keeps the whole sliding window, so even the compaction
    # reuses the prefix up to the summary. It hides what production pays.
    real = real_llama("luna", fresh_server=True, swa_full=True)
    run = await session(real)
    steps, compacted = run.steps, run.compacted_at
    assert all(old_prefilled(real, s) == 0 for j, s in enumerate(steps) if j != compacted)
    assert steps[compacted].cached_tokens > 0
    assert checkpoint_restores(real) == []


async def test_kv_cache_stock_template_drops_old_reasoning_at_each_new_turn(
    real_llama: Callable[..., RealLlama], session: Callable[..., Any]
) -> None:
    real = real_llama("stock", fresh_server=True)
    run = await session(real, turns=3, compact=False)
    steps = run.steps
    tool_rounds, new_turns = steps[1::2], steps[2::2]
    # Within a turn the reasoning sent back extends the cache ...
    assert all(extends(real, s) for s in tool_rounds)
    # ... but the stock template renders no reasoning before the last user message, so each
    # new user turn re-prefills the previous turn (what Luna's template fixes).
    assert new_turns and not any(extends(real, s) for s in new_turns)
    assert all(old_prefilled(real, s) > 8 for s in new_turns)


async def test_kv_cache_without_reasoning_every_tool_round_reprefills(
    real_llama: Callable[..., RealLlama], session: Callable[..., Any]
) -> None:
    real = real_llama("stock", fresh_server=True)
    run = await session(real, "drop", turns=3, compact=False)
    steps = run.steps
    assert not any(extends(real, s) for s in steps[1::2])  # the old behaviour, measured
