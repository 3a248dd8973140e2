"""Model output and server answers that used to break a session: the session goes on.

Scripted server, real Memory (SQLite), real registry. The same cases run against the real
llama-server in tests/llm/test_real_server.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from luna import observe
from luna.agent import Agent
from luna.config import Config
from luna.llm import LLMClient
from luna.memory import Memory
from luna.messages import InboundMessage, Status, ToolFinished, TurnDone, TurnFailed
from tests.fakes.llm_server import FakeLLMServer, Reply, loading_error
from tests.fakes.tools import echo_registry
from tests.history import prompt_view


@pytest.fixture
async def agent(luna_config: Callable[..., Config]) -> AsyncIterator[Callable[..., Any]]:
    opened: list[tuple[Memory, LLMClient]] = []

    async def make(data: dict | None = None) -> Agent:
        cfg = luna_config(data or {})
        observe.setup(cfg.observe.log_dir, console=False)
        memory = Memory(cfg.memory)
        await memory.open(background=False)
        llm = LLMClient(cfg.llm)
        opened.append((memory, llm))
        return Agent(cfg, llm, memory, echo_registry(cfg))

    yield make
    for memory, llm in opened:
        await llm.close()
        await memory.close()
    observe.shutdown()


async def turn(agent: Agent, text: str, session: str = "s") -> list[Any]:
    return [e async for e in agent.run_turn(InboundMessage(session_id=session, text=text))]


def events_log(tmp_path: Path) -> list[dict[str, Any]]:
    lines = []
    for f in (tmp_path / "data" / "logs").glob("*.jsonl"):
        lines += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return lines


async def test_a_cut_off_tool_call_is_not_run_and_the_session_goes_on(
    agent: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    a = await agent()
    cut = Reply(
        tool_calls=[{"name": "echo", "arguments": '{"text": "ls -la /tmp/some dir', "id": "c1"}],
        finish_reason="length",
    )
    llm_server.script(cut, Reply(content="Sorry, let me redo that."), Reply(content="later"))
    events = await turn(a, "list it")
    (finished,) = [e for e in events if isinstance(e, ToolFinished)]
    assert finished.is_error and "length limit" in finished.preview
    assert isinstance(events[-1], TurnDone)
    second = llm_server.requests[1]["messages"]
    assert second[-2]["tool_calls"][0]["function"]["arguments"] == "{}"  # valid on the wire
    assert "ls -la /tmp/some dir" in second[-1]["content"]  # what the model said, kept visible
    assert "echo: ls" not in second[-1]["content"]  # and never run
    # The next turn's history is accepted too (the scripted server refuses broken arguments).
    assert (await turn(a, "thanks"))[-1].reply == "later"


@pytest.mark.parametrize(
    ("call", "said"),
    [
        ({"name": "echo", "arguments": '{"text": "a", '}, '{"text": "a", '),
        ({"name": "no_such_tool", "arguments": "\x00garbage{{"}, "garbage"),
        ({"name": "echo", "arguments": "[1, 2]"}, "[1, 2]"),
    ],
)
async def test_broken_arguments_are_replayed_valid_and_quoted_to_the_model(
    agent: Callable[..., Any], llm_server: FakeLLMServer, call: dict, said: str
) -> None:
    a = await agent()
    llm_server.script(Reply(tool_calls=[call]), Reply(content="ok then"), Reply(content="fine"))
    assert (await turn(a, "go"))[-1].reply == "ok then"
    result = llm_server.requests[1]["messages"][-1]
    assert result["role"] == "tool" and said in result["content"]
    _, history = await prompt_view(a.memory, "s")
    assert history[1]["tool_calls"][0]["function"]["arguments"] == "{}"
    assert (await turn(a, "and now?"))[-1].reply == "fine"


@pytest.mark.parametrize(
    ("policy", "history_has", "turn_has"),
    [("keep", True, True), ("turn", False, True), ("drop", False, False)],
)
async def test_reasoning_is_persisted_and_replayed_per_policy(
    agent: Callable[..., Any],
    llm_server: FakeLLMServer,
    policy: str,
    history_has: bool,
    turn_has: bool,
) -> None:
    a = await agent({"llm": {"history_reasoning": policy}})
    llm_server.script(
        Reply(
            reasoning="The user wants an echo.", tool_calls=[{"name": "echo", "arguments": "{}"}]
        ),
        Reply(reasoning="Done echoing.", content="Echoed."),
        Reply(content="Next."),
    )
    await turn(a, "echo please")
    in_turn = llm_server.requests[1]["messages"][-2]
    assert ("reasoning_content" in in_turn) is turn_has
    assert in_turn.get("reasoning_content", "The user wants an echo.") == "The user wants an echo."
    await turn(a, "next")
    history = [m for m in llm_server.requests[2]["messages"] if m["role"] == "assistant"]
    assert [m.get("reasoning_content") for m in history] == (
        ["The user wants an echo.", "Done echoing."] if history_has else [None, None]
    )
    _, records = await a.memory.prompt_history("s")
    stored = [r.reasoning for r in records if r.role == "assistant"]
    kept = ["The user wants an echo.", "Done echoing."] if turn_has else [None, None]
    assert stored == [*kept, None]  # the last reply had no reasoning


async def test_a_history_outgrowing_the_context_is_trimmed_and_answered(
    agent: Callable[..., Any], llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    a = await agent({"llm": {"context_tokens": 100_000}})  # Luna believes it has room ...
    llm_server.default = Reply(content="noted")
    for i in range(12):
        await turn(a, f"note {i}: " + "lorem ipsum dolor " * 200)  # ~3,600 chars each
    llm_server.reset()
    llm_server.n_ctx = 4096  # ... but the server's context is smaller
    llm_server.default = Reply(content="still here")
    events = await turn(a, "what was note 11 about?")
    assert isinstance(events[-1], TurnDone) and events[-1].reply == "still here"
    sent = llm_server.requests[-1]["messages"]
    assert sent[-1]["content"].startswith("what was note 11 about?")  # the newest stays
    assert len(sent) < 26 and "left out of this request" in sent[0]["content"]
    trims = [e for e in events_log(tmp_path) if e["event"] == "context_trimmed"]
    assert trims and trims[-1]["dropped_messages"] > 0
    _, records = await a.memory.prompt_history("s")
    assert len([r for r in records if r.role == "user"]) == 13  # nothing left the log


async def test_a_newest_message_too_long_for_any_context_is_one_clear_line(
    agent: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    a = await agent({"llm": {"context_tokens": 2048}})
    events = await turn(a, "word " * 20_000)
    assert isinstance(events[-1], TurnFailed) and "no longer fits" in events[-1].message
    _, records = await a.memory.prompt_history("s")
    assert records and records[0].content.startswith("word word")  # kept in the log


async def test_a_turn_whose_tool_results_outgrow_the_context_says_so(
    agent: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    a = await agent({"llm": {"context_tokens": 2048}})  # ~4,600 chars for the prompt
    text = "x" * 390
    calls = [{"name": "echo", "arguments": json.dumps({"text": f"{i} {text}"})} for i in range(12)]
    llm_server.script(Reply(tool_calls=calls))
    events = await turn(a, "echo a lot")
    assert isinstance(events[-1], TurnFailed)
    assert "tool calls and results no longer fit" in events[-1].message
    assert "newest message" not in events[-1].message  # the user's message was short
    llm_server.default = Reply(content="still here")
    assert (await turn(a, "hello"))[-1].reply == "still here"  # the session goes on


async def test_a_reply_with_200_calls_runs_the_first_ones_and_says_so(
    agent: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    a = await agent({"agent": {"max_calls_per_reply": 16}})
    calls = [{"name": "echo", "arguments": json.dumps({"text": f"n{i}"})} for i in range(200)]
    llm_server.script(Reply(tool_calls=calls), Reply(content="ran what I could"))
    events = await turn(a, "echo everything")
    assert isinstance(events[-1], TurnDone) and events[-1].reply == "ran what I could"
    assert len([e for e in events if isinstance(e, ToolFinished)]) == 16
    _, records = await a.memory.prompt_history("s")
    assert len(records[1].tool_calls) == 16  # what ran is what the log replays
    results = [r for r in records if r.role == "tool"]
    assert len(results) == 16 and "asked for 200 tool calls; only the first 16 ran" in (
        results[-1].content
    )
    second = llm_server.requests[1]["messages"]
    assert sum(len(m.get("tool_calls") or []) for m in second) == 16


async def test_an_empty_reply_is_shown_as_a_note_and_stored_as_said(
    agent: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    a = await agent()
    llm_server.script(Reply(content=""), Reply(content="here now"))
    events = await turn(a, "hello?")
    assert isinstance(events[-1], TurnDone) and "empty reply" in events[-1].reply
    _, records = await a.memory.prompt_history("s")
    assert records[-1].role == "assistant" and records[-1].content == ""
    assert (await turn(a, "again"))[-1].reply == "here now"


async def test_a_message_the_server_refuses_is_found_and_left_out(
    agent: Callable[..., Any], llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    a = await agent()
    llm_server.script(Reply(content="first answer"))
    await turn(a, "remember the word POISON-PILL")
    llm_server.poison = "POISON-PILL"  # the server's template now refuses that message
    llm_server.script(Reply(content="second answer"), Reply(content="third answer"))
    events = await turn(a, "what now?")
    assert events[-1].reply == "second answer"
    repaired = [e for e in events_log(tmp_path) if e["event"] == "history_repaired"]
    assert repaired and repaired[0]["roles"] == ["user"]
    assert all("POISON-PILL" not in json.dumps(r["messages"]) for r in llm_server.requests[2:])
    chats = len(llm_server.requests)
    assert (await turn(a, "and again"))[-1].reply == "third answer"
    assert len(llm_server.requests) == chats + 1  # left out at once: no second refusal


async def test_the_round_limit_says_what_was_left_undone(
    agent: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    a = await agent({"agent": {"max_rounds": 1}})
    wants = Reply(tool_calls=[{"name": "echo", "arguments": '{"text": "x"}'}])
    llm_server.script(
        wants, Reply(content='<tool_call>{"name": "echo", "arguments": {}}</tool_call>')
    )
    events = await turn(a, "loop forever")
    done = events[-1]
    assert isinstance(done, TurnDone)
    assert "all 1 tool rounds" in done.reply and "echo" in done.reply
    assert not llm_server.requests[-1].get("tools")  # the wrap-up had no tools


async def test_a_loading_server_is_waited_for_and_the_user_is_told(
    agent: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    a = await agent()
    loading = Reply(status=503, error_body=loading_error())
    llm_server.script(*[loading] * 4, Reply(content="ready now"))
    events = await turn(a, "hello?")
    assert [e.text for e in events if isinstance(e, Status)] == [
        "the LLM server is still loading its model; waiting…"
    ]
    assert events[-1].reply == "ready now"
