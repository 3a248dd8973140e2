"""The agent loop against the scripted LLM server, a real Memory (SQLite) and a real registry."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from luna.agent.loop import WRAP_UP_NOTE, Agent
from luna.config import Config
from luna.llm import LLMClient
from luna.memory import Memory
from luna.messages import (
    InboundMessage,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnDone,
    TurnFailed,
)
from luna.tools.registry import ToolContext, ToolRegistry
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.tools import echo_registry
from tests.history import prompt_view


def agent_registry(cfg: Config) -> ToolRegistry:
    registry = echo_registry(cfg)

    @registry.tool(level="allow")
    async def explode() -> str:
        """Always fails."""
        raise RuntimeError("kaboom")

    return registry


@pytest.fixture
async def agent_factory(
    luna_config: Callable[..., Config],
) -> AsyncIterator[Callable[..., Any]]:
    opened: list[tuple[Memory, LLMClient]] = []

    async def make(data: dict | None = None, *, endpoint: str | None = None) -> Agent:
        data = dict(data or {})
        if endpoint:
            data["llm"] = {"endpoint": endpoint, "max_retries": 0}
        cfg = luna_config(data)
        memory = Memory(cfg.memory)
        await memory.open(background=False)
        llm = LLMClient(cfg.llm)
        opened.append((memory, llm))
        return Agent(cfg, llm, memory, agent_registry(cfg))

    yield make
    for memory, llm in opened:
        await llm.close()
        await memory.close()


async def run(agent: Agent, text: str, session: str = "s1") -> list[Any]:
    return [e async for e in agent.run_turn(InboundMessage(session_id=session, text=text))]


async def test_agent_plain_reply_streams_and_persists(
    agent_factory: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    agent = await agent_factory()
    llm_server.script(Reply(content="Hello there, friend."))
    events = await run(agent, "hi")
    deltas = "".join(e.text for e in events if isinstance(e, TextDelta))
    assert deltas == "Hello there, friend."
    assert isinstance(events[-1], TurnDone) and events[-1].reply == "Hello there, friend."
    request = llm_server.requests[0]
    assert request["stream"] is True
    assert [m["role"] for m in request["messages"]] == ["system", "user"]
    assert request["messages"][1]["content"].startswith("hi\n\n<context>")
    assert {t["function"]["name"] for t in request["tools"]} == {"echo", "explode"}
    summary, history = await prompt_view(agent.memory, "s1")
    assert summary is None
    assert [m["role"] for m in history] == ["user", "assistant"]
    assert history[0]["content"] == request["messages"][1]["content"]  # replayed verbatim


async def test_agent_tool_round_trip_is_persisted(
    agent_factory: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    agent = await agent_factory()
    llm_server.script(
        Reply(tool_calls=[{"name": "echo", "arguments": '{"text": "ping"}', "id": "c1"}]),
        Reply(content="The tool said ping."),
    )
    events = await run(agent, "use the echo tool")
    started = [e for e in events if isinstance(e, ToolStarted)]
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert [e.name for e in started] == ["echo"] and not finished[0].is_error
    assert events[-1].reply == "The tool said ping." and events[-1].rounds == 1
    second = llm_server.requests[1]["messages"]
    assert second[-2]["tool_calls"][0]["function"]["name"] == "echo"
    assert second[-1]["role"] == "tool" and "echo: ping" in second[-1]["content"]
    _, history = await prompt_view(agent.memory, "s1")
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    assert history[2]["tool_call_id"] == "c1"


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        ({"name": "echo", "arguments": "{not json"}, "json"),
        ({"name": "echo", "arguments": '{"txt": 1}'}, "text"),
        ({"name": "ecoh", "arguments": "{}"}, "echo"),
        ({"name": "explode", "arguments": "{}"}, "runtimeerror"),
    ],
)
async def test_agent_bad_tool_calls_become_results_and_turn_goes_on(
    agent_factory: Callable[..., Any], llm_server: FakeLLMServer, call: dict, expected: str
) -> None:
    agent = await agent_factory()
    llm_server.script(Reply(tool_calls=[call]), Reply(content="Recovered."))
    events = await run(agent, "go")
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert finished and finished[0].is_error
    tool_msg = llm_server.requests[1]["messages"][-1]
    assert tool_msg["role"] == "tool" and expected in tool_msg["content"].lower()
    assert events[-1].reply == "Recovered."


async def test_agent_round_limit_ends_with_wrap_up_without_tools(
    agent_factory: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    agent = await agent_factory({"agent": {"max_rounds": 2}})
    loop_call = Reply(tool_calls=[{"name": "echo", "arguments": '{"text": "again"}'}])
    llm_server.script(loop_call, loop_call, Reply(content="Stopping here."))
    events = await run(agent, "loop forever")
    assert events[-1].reply == "Stopping here." and events[-1].rounds == 2
    assert len(llm_server.requests) == 3
    last = llm_server.requests[2]
    assert "tools" not in last or not last["tools"]
    assert last["messages"][-1]["content"] == WRAP_UP_NOTE
    _, history = await prompt_view(agent.memory, "s1")
    assert WRAP_UP_NOTE not in json.dumps(history)  # the note is not persisted


async def test_agent_history_is_append_only_across_turns(
    agent_factory: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    agent = await agent_factory()
    llm_server.script(
        Reply(content="one"),
        Reply(tool_calls=[{"name": "echo", "arguments": '{"text": "x"}'}]),
        Reply(content="two"),
        Reply(content="three"),
    )
    for text in ("first", "second", "third"):
        await run(agent, text)
    reqs = llm_server.requests
    for prev, cur in zip(reqs, reqs[1:], strict=False):
        assert cur["messages"][: len(prev["messages"])] == prev["messages"]
        assert cur["tools"] == prev["tools"]


async def test_agent_llm_down_fails_turn_with_url_but_keeps_message(
    agent_factory: Callable[..., Any], unused_tcp_port: int
) -> None:
    url = f"http://127.0.0.1:{unused_tcp_port}/v1"
    agent = await agent_factory(endpoint=url)
    events = await run(agent, "are you there?")
    assert isinstance(events[-1], TurnFailed)
    assert f"127.0.0.1:{unused_tcp_port}" in events[-1].message
    assert "\n" not in events[-1].message.strip()
    _, history = await prompt_view(agent.memory, "s1")
    assert history[0]["content"].startswith("are you there?")


async def test_agent_turns_in_one_session_run_in_order_sessions_concurrently(
    agent_factory: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    agent = await agent_factory()

    def answer(body: dict[str, Any]) -> Reply:
        last = body["messages"][-1]["content"]
        word = last.split()[0]
        return Reply(content=f"re {word}", delay=0.6 if word == "slow" else 0.0)

    llm_server.default = answer
    finished: list[str] = []

    async def turn(session: str, text: str) -> None:
        events = await run(agent, text, session)
        finished.append(events[-1].reply)

    await asyncio.gather(turn("a", "slow a1"), turn("a", "next a2"), turn("b", "fast b1"))
    # b is not held up by a's slow turn; a's second turn waits for its first.
    assert finished.index("re fast") < finished.index("re slow")
    assert finished.index("re slow") < finished.index("re next")
    _, history = await prompt_view(agent.memory, "a")
    assert [m["content"].split("\n")[0] for m in history] == [
        "slow a1",
        "re slow",
        "next a2",
        "re next",
    ]


async def test_agent_closing_the_stream_cancels_the_turn(
    agent_factory: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    agent = await agent_factory()
    started, cancelled = asyncio.Event(), asyncio.Event()

    @agent.registry.tool(level="allow")
    async def wait_forever() -> str:
        """Never finishes on its own."""
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()
        return "unreachable"

    llm_server.script(
        Reply(tool_calls=[{"name": "wait_forever", "arguments": "{}"}]), Reply(content="ok")
    )
    stream = agent.run_turn(InboundMessage(session_id="s1", text="long"))
    async for event in stream:
        if isinstance(event, ToolStarted):
            break
    await asyncio.wait_for(started.wait(), 30)
    await stream.aclose()
    await asyncio.wait_for(cancelled.wait(), 10)  # the turn's running tool was cancelled
    events = await run(agent, "again")  # and the session is free for the next turn
    assert events[-1].reply == "ok"
    assert len(llm_server.requests) == 2  # the closed turn made no call after its tool


async def test_agent_subagent_shares_turn_budget_and_cannot_spawn(
    agent_factory: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    agent = await agent_factory({"agent": {"max_rounds": 3}})
    captured: dict[str, Any] = {}

    @agent.registry.tool(level="allow", name="delegate")
    async def delegate(task: str, ctx: ToolContext) -> str:
        """Hand a task to a sub-agent.

        Args:
            task: the task
        """
        captured.setdefault("depths", []).append(ctx.depth)
        assert ctx.run_subagent is not None
        return await ctx.run_subagent(task, None, None)

    llm_server.script(
        Reply(tool_calls=[{"name": "delegate", "arguments": '{"task": "echo hi"}'}]),
        Reply(tool_calls=[{"name": "echo", "arguments": '{"text": "hi"}'}]),  # sub-agent
        Reply(tool_calls=[{"name": "echo", "arguments": '{"text": "hi"}'}]),  # sub-agent
        Reply(content="sub done"),  # sub-agent wrap-up (budget used up)
        Reply(content="main done"),  # main wrap-up
    )
    events = await run(agent, "delegate it")
    assert events[-1].reply == "main done"
    sub_request = llm_server.requests[1]
    assert "delegate" not in {t["function"]["name"] for t in sub_request["tools"]}
    assert not llm_server.requests[4].get("tools")
    assert captured["depths"] == [0]  # called once, by the main agent (sub-agents are depth 1)


async def test_agent_turn_waiting_for_its_session_during_drain_is_refused(
    agent_factory: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    agent = await agent_factory()
    release = threading.Event()

    def held(body: dict[str, Any]) -> Reply:  # runs in the server's thread
        release.wait(30)
        return Reply(content="first done")

    llm_server.script(held, Reply(content="never"))
    first = asyncio.ensure_future(run(agent, "first"))
    await asyncio.to_thread(llm_server.wait_for_requests, 1, 30)  # first holds the session
    second = asyncio.ensure_future(run(agent, "second"))  # waits for the session
    drain = asyncio.ensure_future(agent.drain(10.0))
    # Tasks start in the order they were made: second is waiting and drain has begun by the
    # time this thread hop returns; only then does the first turn's LLM call answer.
    await asyncio.to_thread(release.set)
    await drain
    assert (await first)[-1].reply == "first done"
    events = await second
    assert isinstance(events[-1], TurnFailed) and "shutting down" in events[-1].message
    assert len(llm_server.requests) == 1


async def test_agent_interrupted_round_still_logs_the_call(
    agent_factory: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    agent = await agent_factory()
    started = asyncio.Event()

    @agent.registry.tool(level="allow")
    async def slow() -> str:
        """Takes forever."""
        started.set()
        await asyncio.sleep(3600)
        return "unreachable"

    llm_server.script(
        Reply(
            tool_calls=[
                {"name": "echo", "arguments": '{"text": "sent"}', "id": "a"},
                {"name": "slow", "arguments": "{}", "id": "b"},
            ]
        )
    )
    stream = agent.run_turn(InboundMessage(session_id="s1", text="do both"))

    async def consume() -> None:
        async for _ in stream:
            pass

    task = asyncio.ensure_future(consume())
    await asyncio.wait_for(started.wait(), 30)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    _, history = await prompt_view(agent.memory, "s1")
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "tool"]
    assert [c["id"] for c in history[1]["tool_calls"]] == ["a", "b"]
    assert "echo: sent" in history[2]["content"]  # the finished tool's result was kept
    # The interrupted call is shown as such, so the server accepts the history.
    assert history[3]["tool_call_id"] == "b" and "interrupted" in history[3]["content"]


async def test_agent_forgets_session_locks_when_idle(
    agent_factory: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    agent = await agent_factory()
    llm_server.default = Reply(content="ok")

    def live_locks() -> int:
        gc.collect()
        # type(o), not isinstance(o, ...): isinstance reads each object's __class__, and the
        # openai package's lazy module-client proxies (openai.beta, ...) import their
        # resources on it: 1,546 modules, 4 s, counting nothing.
        return sum(issubclass(type(o), asyncio.Lock) for o in gc.get_objects())

    await run(agent, "warm up", "warm")  # whatever the first turn creates once
    before = live_locks()
    sessions = 30
    await asyncio.gather(
        *(run(agent, "hi", f"s{i}") for i in range(sessions)), run(agent, "again", "s0")
    )
    # No per-session state outlives its turns: a long-running bot does not grow per session.
    assert live_locks() - before < sessions // 3
    _, history = await prompt_view(agent.memory, "s0")
    assert [m["role"] for m in history] == ["user", "assistant"] * 2  # s0 still ran in order
