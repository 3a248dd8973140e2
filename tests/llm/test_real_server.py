"""Luna against the real C++ llama-server rendering Qwen3.5's template (Gemma 3 270M weights).

Every claim the scripted server makes about the wire is checked here against the real one.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from luna import observe
from luna.agent import Agent
from luna.config import Config, build_config
from luna.errors import LLMContextOverflowError, LLMError
from luna.llm import LLMClient
from luna.memory import Memory
from luna.messages import InboundMessage, ToolFinished, TurnDone
from luna.tools.registry import ToolRegistry
from tests.fakes.llm_server import FakeLLMServer
from tests.real_llama import ALIAS, RealLlama

USER = [{"role": "user", "content": "Complete the list: one, two, three,"}]
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers.",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
EXAMPLES = [(1, 1), (4, 5), (7, 2), (3, 3)]


def real_config(tmp_path: Path, real: RealLlama, **llm: Any) -> Config:
    data = {
        "llm": {"endpoint": real.url, "model": ALIAS, "temperature": 0.0, "max_retries": 1, **llm},
        "memory": {"db_path": str(tmp_path / "data" / "luna.db"), "librarian": False},
        "observe": {"log_dir": str(tmp_path / "data" / "logs"), "console": False},
        "agent": {"workspace": str(tmp_path / "ws"), "system_prompt": "You add numbers."},
        "mcp": {"servers_file": str(tmp_path / "none.json")},
    }
    return build_config(data, {}, base_dir=tmp_path)


def few_shot() -> list[dict[str, Any]]:
    """Four worked examples: enough for the tiny base model to copy the tool-call pattern."""
    out: list[dict[str, Any]] = []
    for i, (a, b) in enumerate(EXAMPLES):
        args = json.dumps({"a": a, "b": b})
        out += [
            {"role": "user", "content": f"What is {a}+{b}?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": f"c{i}",
                        "type": "function",
                        "function": {"name": "add", "arguments": args},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": f"c{i}", "content": str(a + b)},
            {"role": "assistant", "content": str(a + b)},
        ]
    return out


def add_registry(cfg: Config, ran: list[tuple[int, int]]) -> ToolRegistry:
    registry = ToolRegistry(cfg)

    @registry.tool(level="allow")
    async def add(a: int, b: int) -> str:
        """Add two integers.

        Args:
            a: the first
            b: the second
        """
        ran.append((a, b))
        return str(a + b)

    return registry


@pytest.fixture
async def parts(tmp_path: Path) -> AsyncIterator[Callable[..., Any]]:
    opened: list[Any] = []

    async def make(real: RealLlama, ran: list[tuple[int, int]], **llm: Any) -> Agent:
        cfg = real_config(tmp_path, real, **llm)
        observe.setup(cfg.observe.log_dir, console=False)
        memory = Memory(cfg.memory)
        await memory.open(background=False)
        client = LLMClient(cfg.llm)
        opened.extend([client, memory])
        return Agent(cfg, client, memory, add_registry(cfg, ran))

    yield make
    for part in opened:
        await part.close()
    observe.shutdown()


async def test_real_stream_reports_usage_and_timings(
    tmp_path: Path, real_llama: Callable[..., RealLlama]
) -> None:
    real = real_llama("stock", fresh_server=True)
    client = LLMClient(real_config(tmp_path, real, max_tokens=8).llm)
    try:
        first = await client.stream(USER)
        second = await client.stream(USER)
    finally:
        await client.close()
    for resp in (first, second):
        u = resp.usage
        assert u is not None and u.prompt_tokens == u.cached_tokens + u.prefilled_tokens
        assert u.completion_tokens > 0 and u.prompt_ms > 0
    assert first.usage.cached_tokens == 0 and second.usage.cached_tokens > 0  # the prompt cache


async def test_real_reasoning_arrives_in_reasoning_content(
    tmp_path: Path, real_llama: Callable[..., RealLlama]
) -> None:
    # The Qwen3.5 template opens <think>: what the model writes first is reasoning.
    client = LLMClient(real_config(tmp_path, real_llama("stock"), max_tokens=12).llm)
    deltas: list[str] = []

    async def on_reasoning(text: str) -> None:
        deltas.append(text)

    try:
        resp = await client.stream(USER, on_reasoning=on_reasoning)
    finally:
        await client.close()
    assert resp.reasoning and "".join(deltas).strip() == resp.reasoning.strip()
    assert resp.content  # nothing after </think>: the reasoning is shown as the reply


async def test_real_required_tool_call_is_parsed_by_the_server(
    tmp_path: Path, real_llama: Callable[..., RealLlama]
) -> None:
    client = LLMClient(real_config(tmp_path, real_llama("stock"), max_tokens=40).llm)
    messages = [*few_shot(), {"role": "user", "content": "What is 2+3?"}]
    try:
        resp = await client.chat(messages, [ADD], tool_choice="required")
    finally:
        await client.close()
    assert [c.name for c in resp.tool_calls][:1] == ["add"]
    assert json.loads(resp.tool_calls[0].arguments) == {"a": 2, "b": 3}


async def test_real_tool_call_runs_in_lunas_loop_and_a_cut_off_one_never_runs(
    parts: Callable[..., Any], real_llama: Callable[..., RealLlama]
) -> None:
    real = real_llama("stock")
    ran: list[tuple[int, int]] = []
    agent = await parts(real, ran, max_tokens=60)
    for message in few_shot():
        await agent.memory.append_message("s", message)
    events = [e async for e in agent.run_turn(InboundMessage("s", "What is 2+3?"))]
    assert isinstance(events[-1], TurnDone), events[-1]
    assert ran and ran[0] == (2, 3)  # parsed by the server from generated text, run by Luna
    finished = [e for e in events if isinstance(e, ToolFinished)]
    # At max_tokens the model was cut off in a second call: it was refused, not run.
    assert all(not e.is_error or "length limit" in e.preview for e in finished)
    assert len(ran) == len([e for e in finished if not e.is_error])
    # The session's next turn is accepted by the real server (nothing broken was replayed).
    again = [e async for e in agent.run_turn(InboundMessage("s", "What is 1+2?"))]
    assert isinstance(again[-1], TurnDone), again[-1]


POISON = [
    {"role": "user", "content": "list the folder"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "t1", "type": "function",
             "function": {"name": "bash", "arguments": '{"command": "ls -la /tmp/some dir'}},
            {"id": "t2", "type": "function",
             "function": {"name": "no_such_tool", "arguments": "\x00{{garbage"}},
        ],
    },
    {"role": "tool", "tool_call_id": "t1", "content": "caf\udce9 \udcff\x00bytes"},
    {"role": "tool", "tool_call_id": "t2", "content": "Unknown tool"},
    {"role": "assistant", "content": "Done."},
]  # fmt: skip


async def test_real_server_refuses_poisoned_history_but_luna_replays_it_valid(
    parts: Callable[..., Any], real_llama: Callable[..., RealLlama]
) -> None:
    real = real_llama("stock")
    raw = json.dumps({"messages": [*POISON[:4], {"role": "user", "content": "hi"}]})
    async with httpx.AsyncClient(timeout=60) as h:
        r = await h.post(f"{real.url}/chat/completions", content=raw)
    assert r.status_code in (400, 500)  # as sent by the old code: the session was dead
    agent = await parts(real, [], max_tokens=8)
    for message in POISON:
        await agent.memory.append_message("s", message)
    events = [e async for e in agent.run_turn(InboundMessage("s", "and now?"))]
    assert isinstance(events[-1], TurnDone), events[-1]


async def test_real_prompt_longer_than_the_context_is_an_error_then_trimmed(
    parts: Callable[..., Any], real_llama: Callable[..., RealLlama], tmp_path: Path
) -> None:
    real = real_llama("stock")  # -c 8192
    client = LLMClient(real_config(tmp_path, real).llm)
    try:
        with pytest.raises(LLMContextOverflowError) as info:
            await client.chat([{"role": "user", "content": "word " * 9000}])
    finally:
        await client.close()
    assert info.value.n_ctx == 8192 and info.value.n_prompt_tokens > 8192
    agent = await parts(real, [], max_tokens=8, context_tokens=131072)
    for i in range(4):  # emoji: a token per character, so a chars/3 estimate is too low
        await agent.memory.append_message("s", {"role": "user", "content": f"{i} " + "🦀" * 2600})
        await agent.memory.append_message("s", {"role": "assistant", "content": "ok"})
    events = [e async for e in agent.run_turn(InboundMessage("s", "still there?"))]
    assert isinstance(events[-1], TurnDone), events[-1]
    log = "".join(p.read_text() for p in (tmp_path / "data" / "logs").glob("*.jsonl"))
    trims = [json.loads(line) for line in log.splitlines() if '"context_trimmed"' in line]
    assert trims and trims[-1]["reason"] == "server"  # the server's 400, then one retry


async def test_real_server_still_loading_is_waited_for(
    tmp_path: Path, real_llama: Callable[..., RealLlama]
) -> None:
    base = real_llama("stock")
    loading = RealLlama(
        Path(base.args[base.args.index("--model") + 1]), tmp_path / "loading.log", ctx=131072
    ).spawn()
    try:
        seen = set()
        async with httpx.AsyncClient(timeout=1) as h:
            while 503 not in seen:  # the HTTP side is up before the model: /health says 503
                try:
                    seen.add((await h.get(f"{loading.root_url}/health")).status_code)
                except httpx.HTTPError:
                    continue
                assert 200 not in seen, "the model loaded before the test could see it load"
        statuses: list[str] = []

        async def on_status(text: str) -> None:
            statuses.append(text)

        client = LLMClient(real_config(tmp_path, loading, max_tokens=4, max_retries=0).llm)
        try:
            resp = await client.chat(USER, on_status=on_status)
        finally:
            await client.close()
        assert resp.usage is not None and resp.usage.prompt_tokens > 0
        assert statuses == ["the LLM server is still loading its model; waiting…"]
    finally:
        loading.stop()


async def test_real_server_killed_mid_reply_is_one_clear_line(
    tmp_path: Path, real_llama: Callable[..., RealLlama]
) -> None:
    """llama-server streams chunked: killed mid-reply, the body is incomplete. The scripted
    server cuts its streams the same way (tests/fakes: a stream cut short)."""
    base = real_llama("stock")
    doomed = RealLlama(Path(base.args[base.args.index("--model") + 1]), tmp_path / "k.log").start()
    client = LLMClient(real_config(tmp_path, doomed, max_tokens=4000, max_retries=0).llm)
    chunks: list[str] = []

    async def on_text(text: str) -> None:
        chunks.append(text)
        if len(chunks) == 3 and doomed.proc is not None:
            doomed.proc.kill()  # kill -9 while it generates

    try:
        with pytest.raises(LLMError) as info:
            await client.stream([{"role": "user", "content": "Count to one thousand:"}],
                                on_text=on_text, on_reasoning=on_text)  # fmt: skip
    finally:
        await client.close()
        doomed.stop()
    assert len(chunks) >= 3
    assert "ended before the reply was complete (the server closed the connection" in str(
        info.value
    )


BROKEN_CALL = {
    "role": "assistant",
    "content": "",
    "tool_calls": [
        {"id": "t1", "type": "function",
         "function": {"name": "bash", "arguments": '{"command": "ls -la /tmp/some dir'}}
    ],
}  # fmt: skip
REFUSALS = {
    "system message not first": (
        [{"role": "user", "content": "a"}, {"role": "system", "content": "late"}], 500
    ),
    "null reasoning": (
        [{"role": "user", "content": "a"},
         {"role": "assistant", "content": "", "reasoning_content": None},
         {"role": "user", "content": "b"}], 500
    ),
    "broken tool arguments": (
        [{"role": "user", "content": "a"}, BROKEN_CALL,
         {"role": "tool", "tool_call_id": "t1", "content": "x"},
         {"role": "user", "content": "b"}], 500
    ),
    "null content is fine": (
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": None},
         {"role": "user", "content": "b"}], 200
    ),
    "lone surrogate": ([{"role": "user", "content": "a\ud800"}], 400),
    "longer than the context": ([{"role": "user", "content": "word " * 9000}], 400),
}  # fmt: skip


@pytest.mark.parametrize("case", list(REFUSALS))
def test_scripted_server_refuses_exactly_what_the_real_one_refuses(
    case: str, real_llama: Callable[..., RealLlama], llm_server: FakeLLMServer
) -> None:
    messages, status = REFUSALS[case]
    body = json.dumps({"messages": messages, "max_tokens": 2})
    answers = {}
    for name, url in (("real", real_llama("stock").url), ("scripted", llm_server.url)):
        r = httpx.post(f"{url}/chat/completions", content=body, timeout=60)
        answers[name] = (r.status_code, r.json().get("error", {}).get("type"))
    assert answers["real"] == answers["scripted"] and answers["real"][0] == status, answers
