"""LLMClient against the scripted OpenAI-compatible server (real HTTP on 127.0.0.1)."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from luna import observe
from luna.config import Config
from luna.errors import (
    LLMContextOverflowError,
    LLMError,
    LLMRejectedError,
    LLMUnreachableError,
)
from luna.llm.client import LLMClient, normalize_messages
from luna.llm.transport import shared_tls
from luna.messages import ToolCall
from tests.fakes.llm_server import FakeLLMServer, Reply, loading_error

USER = [{"role": "user", "content": "hi"}]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "limit": {"type": "integer"}},
                "required": ["path"],
            },
        },
    }
]


@pytest.fixture
async def client(luna_config: Callable[..., Config]) -> AsyncIterator[LLMClient]:
    c = LLMClient(luna_config().llm)
    yield c
    await c.close()


class Collector:
    def __init__(self) -> None:
        self.text: list[str] = []
        self.reasoning: list[str] = []

    async def on_text(self, t: str) -> None:
        self.text.append(t)

    async def on_reasoning(self, t: str) -> None:
        self.reasoning.append(t)


async def _stream(client: LLMClient, messages=USER, tools=None) -> tuple:
    col = Collector()
    resp = await client.stream(messages, tools, on_text=col.on_text, on_reasoning=col.on_reasoning)
    return resp, col


async def test_llm_chat_returns_content_usage_and_sends_params(
    client: LLMClient, llm_server: FakeLLMServer
) -> None:
    llm_server.script(
        Reply(
            content="hello there",
            usage={
                "prompt_tokens": 12,
                "completion_tokens": 3,
                "total_tokens": 15,
                "prompt_tokens_details": {"cached_tokens": 8},
            },
        )
    )
    resp = await client.chat(
        USER,
        temperature=0.1,
        max_tokens=33,
        response_format={"type": "json_object"},
    )
    assert resp.content == "hello there"
    assert resp.finish_reason == "stop"
    assert resp.usage is not None
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (12, 3)
    assert resp.usage.cached_tokens == 8
    assert resp.latency_s > 0
    sent = llm_server.requests[0]
    assert sent["temperature"] == 0.1 and sent["max_tokens"] == 33
    assert sent["response_format"] == {"type": "json_object"}
    assert "tools" not in sent


async def test_llm_stream_delivers_text_and_reasoning_deltas(
    client: LLMClient, llm_server: FakeLLMServer
) -> None:
    llm_server.script(Reply(content="The answer is 42.", reasoning="let me think", chunk_size=3))
    resp, col = await _stream(client)
    assert resp.content == "The answer is 42."
    assert resp.reasoning == "let me think"
    assert len(col.text) > 1 and "".join(col.text) == "The answer is 42."
    assert "".join(col.reasoning) == "let me think"
    assert resp.usage is not None and resp.usage.prompt_tokens > 0
    assert llm_server.requests[0]["stream_options"] == {"include_usage": True}


async def test_llm_stream_assembles_tool_call_deltas_by_index(
    client: LLMClient, llm_server: FakeLLMServer
) -> None:
    llm_server.script(
        Reply(
            tool_calls=[
                {"name": "read_file", "arguments": '{"path": "/tmp/a.txt"}', "id": "c1"},
                {"name": "read_file", "arguments": '{"path": "/tmp/b.txt", "limit": 5}'},
            ],
            chunk_size=2,
        )
    )
    resp, col = await _stream(client, tools=TOOLS)
    assert resp.finish_reason == "tool_calls"
    assert [tc.name for tc in resp.tool_calls] == ["read_file", "read_file"]
    assert resp.tool_calls[0].id == "c1"
    assert json.loads(resp.tool_calls[1].arguments) == {"path": "/tmp/b.txt", "limit": 5}
    assert resp.content == "" and col.text == []
    assert llm_server.requests[0]["tools"] == TOOLS


async def test_llm_reasoning_fallback_when_content_empty(
    client: LLMClient, llm_server: FakeLLMServer
) -> None:
    llm_server.script(Reply(content="", reasoning="<think>Paris is the capital.</think>"))
    resp = await client.chat(USER)
    assert resp.content == "Paris is the capital."
    llm_server.script(Reply(content="", reasoning="Only reasoning here."))
    resp, col = await _stream(client)
    assert resp.content == "Only reasoning here."
    assert "".join(col.text) == "Only reasoning here."


@pytest.mark.parametrize(
    "raw, content, reasoning",
    [
        ("<think>plan</think>\n\nHello!", "Hello!", "plan"),
        ("<think>unclosed and cut off", "", "unclosed and cut off"),
        ("template opened it</think>Hi.", "Hi.", "template opened it"),
        ("Answer<|im_end|>", "Answer", ""),
    ],
)
async def test_llm_strips_leaked_think_markup(
    client: LLMClient, llm_server: FakeLLMServer, raw: str, content: str, reasoning: str
) -> None:
    llm_server.script(Reply(content=raw), Reply(content=raw, chunk_size=2))
    resp = await client.chat(USER)
    expected = content or reasoning  # empty content falls back to the reasoning
    assert resp.content == expected
    assert resp.reasoning == reasoning
    streamed, col = await _stream(client)
    assert streamed.content == expected
    shown = "".join(col.text)
    assert "<think>" not in shown and "</think>" not in shown and "<|" not in shown
    if raw.startswith("<think>"):
        assert shown.strip() == expected


async def test_llm_recovers_hermes_tool_call_from_text(
    client: LLMClient, llm_server: FakeLLMServer
) -> None:
    text = (
        'Let me look.\n<tool_call>\n{"name": "read_file", "arguments": {"path": "/etc/hosts"}}'
        "\n</tool_call>"
    )
    llm_server.script(Reply(content=text), Reply(content=text, chunk_size=3))
    resp = await client.chat(USER, TOOLS)
    assert resp.content == "Let me look."
    assert [(tc.name, json.loads(tc.arguments)) for tc in resp.tool_calls] == [
        ("read_file", {"path": "/etc/hosts"})
    ]
    assert resp.tool_calls[0].id and resp.finish_reason == "tool_calls"
    streamed, col = await _stream(client, tools=TOOLS)
    assert "".join(col.text).strip() == "Let me look."
    assert streamed.tool_calls[0].name == "read_file"


async def test_llm_recovers_qwen_xml_tool_call_while_streaming(
    client: LLMClient, llm_server: FakeLLMServer
) -> None:
    text = (
        "<tool_call>\n<function=read_file>\n<parameter=path>\n/tmp/x 1.txt\n</parameter>\n"
        "<parameter=limit>\n20\n</parameter>\n</function>\n</tool_call>"
    )
    llm_server.script(Reply(content=text, chunk_size=1))
    resp, col = await _stream(client, tools=TOOLS)
    assert col.text == []
    assert resp.content == ""
    assert len(resp.tool_calls) == 1
    assert resp.tool_calls[0].name == "read_file"
    assert json.loads(resp.tool_calls[0].arguments) == {"path": "/tmp/x 1.txt", "limit": 20}


async def test_llm_stream_keeps_plain_angle_brackets(
    client: LLMClient, llm_server: FakeLLMServer
) -> None:
    llm_server.script(Reply(content="if a < b and x<t then <b>bold</b>", chunk_size=1))
    resp, col = await _stream(client)
    assert "".join(col.text) == resp.content == "if a < b and x<t then <b>bold</b>"


async def test_llm_normalization_avoids_server_refusals(
    client: LLMClient, llm_server: FakeLLMServer
) -> None:
    messages = [
        {"role": "system", "content": "You are Luna."},
        {"role": "user", "content": "read it \ud800"},
        {
            "role": "assistant",
            "content": None,
            "reasoning_content": None,
            "tool_calls": [
                ToolCall(id="c1", name="read_file", arguments='{"path": "a'),
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "file text"},
        {"role": "system", "content": "Summary of earlier talk."},
        {"role": "user", "content": "thanks"},
    ]
    resp = await client.chat(messages)
    assert resp.content == "ok"
    sent = llm_server.requests[0]["messages"]
    assert [m["role"] for m in sent] == ["system", "user", "assistant", "tool", "user"]
    assert sent[0]["content"] == "You are Luna.\n\nSummary of earlier talk."
    assert sent[1]["content"] == "read it \ufffd"  # a lone surrogate, replaced visibly
    assert sent[2]["content"] == "" and "reasoning_content" not in sent[2]
    assert sent[2]["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}
    ]  # cut-off arguments are replayed as an empty object, never as broken JSON
    assert normalize_messages(messages) == sent
    # Each thing normalization fixed is something the server refuses:
    async with httpx.AsyncClient(timeout=10) as h:
        for broken, status in (
            ([messages[0], messages[5], messages[4], {"role": "user", "content": "x"}], 500),
            ([{"role": "user", "content": "x"}, {**sent[2], "reasoning_content": None}], 500),
            ([{**sent[2], "tool_calls": [{**sent[2]["tool_calls"][0], "function": {
                "name": "read_file", "arguments": '{"path": "a'}}]}], 500),
        ):  # fmt: skip
            r = await h.post(f"{llm_server.url}/chat/completions", json={"messages": broken})
            assert r.status_code == status, broken
        raw = json.dumps({"messages": [{"role": "user", "content": "a\ud800"}]})
        r = await h.post(f"{llm_server.url}/chat/completions", content=raw)
        assert r.status_code == 400
        r = await h.post(f"{llm_server.url}/chat/completions", json={"messages": sent})
        assert r.status_code == 200


async def test_llm_retries_502_and_429_then_succeeds(
    client: LLMClient, llm_server: FakeLLMServer
) -> None:
    llm_server.script(Reply(status=502), Reply(status=429), Reply(content="third time"))
    resp = await client.chat(USER)
    assert resp.content == "third time"
    assert len(llm_server.requests) == 3
    llm_server.script(Reply(status=503), Reply(content="streamed after retry"))
    resp, col = await _stream(client)
    assert "".join(col.text) == "streamed after retry"


async def test_llm_gives_up_after_max_retries_with_status(
    client: LLMClient, llm_server: FakeLLMServer
) -> None:
    llm_server.script(*[Reply(status=504, error_body={"error": {"message": "boom"}})] * 3)
    with pytest.raises(LLMError) as info:
        await client.chat(USER)
    assert not isinstance(info.value, LLMUnreachableError)
    assert "HTTP 504" in str(info.value) and "boom" in str(info.value)
    assert len(llm_server.requests) == 3  # first try + max_retries=2


async def test_llm_500_and_400_are_rejections_not_retried(
    client: LLMClient, llm_server: FakeLLMServer
) -> None:
    # llama-server's 500s are deterministic (a history its template refuses): retrying the
    # same request cannot help, so the caller gets a rejection to repair.
    llm_server.script(Reply(status=500), Reply(content="never"))
    with pytest.raises(LLMRejectedError) as info:
        await client.chat(USER)
    assert info.value.status == 500 and len(llm_server.requests) == 1


async def test_llm_context_overflow_carries_the_servers_counts(
    client: LLMClient, llm_server: FakeLLMServer
) -> None:
    big = [{"role": "user", "content": "word " * 9000}]  # > the fake's 8192-token context
    for call in (client.chat(big), client.stream(big)):
        with pytest.raises(LLMContextOverflowError) as info:
            await call
        assert info.value.n_ctx == 8192 and info.value.n_prompt_tokens > 8192


async def test_llm_waits_while_the_server_loads_its_model(
    client: LLMClient, llm_server: FakeLLMServer
) -> None:
    loading = Reply(status=503, error_body=loading_error())
    llm_server.script(*[loading] * 5, Reply(content="loaded"))  # more 503s than max_retries
    statuses: list[str] = []

    async def on_status(text: str) -> None:
        statuses.append(text)

    resp = await client.chat(USER, on_status=on_status)
    assert resp.content == "loaded" and len(llm_server.requests) == 6
    assert statuses == ["the LLM server is still loading its model; waiting…"]  # said once


async def test_llm_does_not_retry_400(client: LLMClient, llm_server: FakeLLMServer) -> None:
    llm_server.script(Reply(status=400), Reply(content="never"))
    with pytest.raises(LLMError, match="HTTP 400"):
        await client.chat(USER)
    assert len(llm_server.requests) == 1


async def test_llm_unreachable_endpoint_names_url_and_fix(
    luna_config: Callable[..., Config],
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    client = LLMClient(luna_config({"llm": {"endpoint": url, "max_retries": 1}}).llm)
    try:
        for call in (client.chat(USER), client.stream(USER)):
            with pytest.raises(LLMUnreachableError) as info:
                await call
            msg = str(info.value)
            assert url in msg and "connection refused" in msg and "LLM_ENDPOINT" in msg
            assert "\n" not in msg
    finally:
        await client.close()


async def test_llm_read_timeout_is_llm_error(
    luna_config: Callable[..., Config], llm_server: FakeLLMServer
) -> None:
    cfg = luna_config({"llm": {"timeout": 0.3, "max_retries": 0}}).llm
    client = LLMClient(cfg)
    llm_server.script(Reply(content="late", delay=2.0))
    try:
        with pytest.raises(LLMError, match="did not finish within 0.3s") as info:
            await client.chat(USER)
        assert not isinstance(info.value, LLMUnreachableError)
    finally:
        await client.close()


async def test_llm_server_info_reads_llama_server_props(
    client: LLMClient, luna_config: Callable[..., Config]
) -> None:
    info = await client.server_info()
    assert info is not None and info.n_ctx == 8192 and info.total_slots == 1
    with FakeLLMServer(props=False) as bare:
        other = LLMClient(luna_config().llm.model_copy(update={"endpoint": bare.url}))
        try:
            assert await other.server_info() is None  # not llama-server: no llama.cpp fields
            await other.chat(USER)
            assert "chat_template_kwargs" not in bare.requests[0]  # nor llama.cpp extras
        finally:
            await other.close()


async def test_llm_grammar_goes_to_llama_server_only_with_plain_replies(
    luna_config: Callable[..., Config], llm_server: FakeLLMServer
) -> None:
    """``llm.grammar`` rides on plain requests; tools and a response_format bring their own
    constraints (llama-server refuses a grammar beside tools), other servers get none."""
    grammar = "root ::= [a-z]+"
    cfg = luna_config().llm.model_copy(update={"grammar": grammar})
    client = LLMClient(cfg)
    try:
        await client.chat(USER)
        await _stream(client)
        await client.chat(USER, tools=TOOLS)
        await client.chat(USER, response_format={"type": "json_object"})
    finally:
        await client.close()
    assert [r.get("grammar") for r in llm_server.requests] == [grammar, grammar, None, None]
    with FakeLLMServer(props=False) as bare:
        other = LLMClient(cfg.model_copy(update={"endpoint": bare.url}))
        try:
            await other.chat(USER)
        finally:
            await other.close()
        assert "grammar" not in bare.requests[0]


async def test_llm_sends_api_key_only_as_bearer(
    luna_config: Callable[..., Config], llm_server: FakeLLMServer
) -> None:
    cfg = luna_config(env={"LLM_API_KEY": "sekrit-key-123"}).llm
    client = LLMClient(cfg)
    try:
        await client.chat(USER)
    finally:
        await client.close()
    assert "sekrit-key-123" not in json.dumps(llm_server.requests)
    assert llm_server.headers[0].get("authorization") == "Bearer sekrit-key-123"


async def test_llm_stream_cut_short_is_llm_error(
    client: LLMClient, llm_server: FakeLLMServer
) -> None:
    llm_server.script(
        Reply(tool_calls=[{"name": "read_file", "arguments": '{"path": "/x"}'}], abort_after=3)
    )
    with pytest.raises(LLMError, match="ended before the reply was complete"):
        await _stream(client, tools=TOOLS)


async def test_llm_stream_read_timeout_mid_stream(
    luna_config: Callable[..., Config], llm_server: FakeLLMServer
) -> None:
    client = LLMClient(luna_config({"llm": {"timeout": 0.3, "max_retries": 0}}).llm)
    llm_server.script(Reply(content="slow words here", chunk_size=5, chunk_delay=1.0))
    col = Collector()
    try:
        with pytest.raises(LLMError, match="did not finish within 0.3s"):
            await client.stream(USER, on_text=col.on_text)
    finally:
        await client.close()
    assert "slow words here".startswith("".join(col.text))


async def test_llm_stream_with_invalid_utf8_keeps_the_reply(
    client: LLMClient, llm_server: FakeLLMServer
) -> None:
    llm_server.script(Reply(content=" and more", raw_bytes=b"caf\xe9 ok"))
    resp, col = await _stream(client)
    assert resp.content == "caf\ufffd ok and more" == "".join(col.text)


async def test_llm_timeout_bounds_a_stream_of_keepalive_comments(
    luna_config: Callable[..., Config], llm_server: FakeLLMServer
) -> None:
    # SSE comments reset a read timeout forever; llm.timeout is the whole response.
    client = LLMClient(luna_config({"llm": {"timeout": 1.0, "max_retries": 0}}).llm)
    llm_server.script(Reply(content="never", pings=100, ping_interval=0.1))
    try:
        with pytest.raises(LLMError, match="did not finish within 1s"):
            await client.stream(USER)
    finally:
        await client.close()


async def test_llm_first_byte_timeout_is_its_own_limit(
    luna_config: Callable[..., Config], llm_server: FakeLLMServer
) -> None:
    cfg = luna_config({"llm": {"timeout": 30.0, "first_byte_timeout": 0.5, "max_retries": 0}})
    client = LLMClient(cfg.llm)
    llm_server.script(Reply(content="late", delay=3.0))
    try:
        with pytest.raises(LLMError, match="sent nothing for 0.5s"):
            await client.stream(USER)
    finally:
        await client.close()


async def test_llm_stream_cancel_propagates(client: LLMClient, llm_server: FakeLLMServer) -> None:
    llm_server.script(Reply(content="x" * 40, chunk_size=1, chunk_delay=0.05))
    first = asyncio.Event()

    async def on_text(text: str) -> None:
        first.set()

    task = asyncio.create_task(client.stream(USER, on_text=on_text))
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    llm_server.script(Reply(content="still usable"))
    assert (await client.chat(USER)).content == "still usable"


async def test_llm_logs_llm_call_event(
    client: LLMClient, llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    observe.setup(tmp_path / "logs", console=False)
    try:
        await client.chat(USER)
        llm_server.script(Reply(status=400))
        with pytest.raises(LLMError):
            await client.stream(USER)
    finally:
        observe.shutdown()
    lines = [
        json.loads(line)
        for f in (tmp_path / "logs").glob("luna-*.jsonl")
        for line in f.read_text().splitlines()
    ]
    calls = [e for e in lines if e["event"] == "llm_call"]
    assert len(calls) == 2
    assert calls[0]["stream"] is False and calls[0]["prompt_tokens"] > 0 and not calls[0]["error"]
    assert calls[1]["stream"] is True and "HTTP 400" in calls[1]["error"]
    assert all(c["latency_ms"] >= 0 for c in calls)


HISTORY = [
    {"role": "system", "content": "You are Luna."},
    {"role": "user", "content": "read notes.txt"},
    {
        "role": "assistant",
        "content": "",
        "reasoning_content": "the user wants the file",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "read_file", "arguments": '{"path": "notes.txt"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "buy tulips\n"},
    {"role": "user", "content": "thanks"},
]


@pytest.mark.parametrize("streamed", [True, False])
async def test_llm_sends_the_body_it_records(
    client: LLMClient, llm_server: FakeLLMServer, streamed: bool
) -> None:
    """The messages and tools go on the wire as given (past the SDK's own transform): the
    server receives exactly the body the request log keeps for `luna replay`."""
    recorded: list[dict] = []

    async def record(body, response, error) -> None:
        recorded.append(body)

    llm_server.script(Reply(content="done"))
    if streamed:
        await client.stream(HISTORY, TOOLS, tool_choice="auto", record=record)
    else:
        await client.chat(HISTORY, TOOLS, tool_choice="auto", record=record)
    sent = llm_server.requests[0]
    assert sent == json.loads(json.dumps(recorded[0]))
    assert sent["messages"] == normalize_messages(HISTORY) and sent["messages"][2]["tool_calls"]
    assert sent["tools"] == TOOLS and sent["tool_choice"] == "auto"
    assert sent["model"] == client.model and sent.get("stream", False) is streamed


async def test_llm_connection_reset_names_the_cause(luna_config: Callable[..., Config]) -> None:
    """A server that resets the connection (here: reads the request, then RST) is one line
    naming what happened, not the SDK's bare "Connection error."."""
    import struct
    import threading

    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def reset_every_connection() -> None:
        while True:
            try:
                conn, _addr = listener.accept()
            except OSError:  # closed at the end of the test
                return
            conn.recv(65536)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    threading.Thread(target=reset_every_connection, daemon=True).start()
    cfg = luna_config({"llm": {"endpoint": f"http://127.0.0.1:{port}/v1", "max_retries": 0}})
    c = LLMClient(cfg.llm)
    try:
        with pytest.raises(LLMError) as info:
            await c.stream(USER)
    finally:
        await c.close()
        listener.close()
    assert "Connection reset by peer" in str(info.value), info.value
    assert "Connection error." not in str(info.value)


@pytest.mark.parametrize("streamed", [True, False])
async def test_llm_retries_a_connection_closed_before_any_answer(
    client: LLMClient, llm_server: FakeLLMServer, streamed: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A kept-alive connection the server closed just as the request went out (the real
    llama-server did this once mid-turn in CI): nothing was answered, so it is sent again."""
    llm_server.script(Reply(drop=True), Reply(content="hello"))
    with caplog.at_level(logging.WARNING, logger="luna.llm.retrying"):
        resp = await (client.stream(USER) if streamed else client.chat(USER))
    assert resp.content == "hello"
    assert len(llm_server.requests) == 2
    (retry,) = [r for r in caplog.records if "retry" in r.getMessage()]
    assert retry.getMessage().endswith("in 0.00s")  # a fresh connection needs no backoff


def test_llm_clients_share_one_tls_context_that_verifies() -> None:
    tls = shared_tls()
    assert tls is shared_tls()  # built once: loading the CA bundle costs 30-40 ms a client
    assert tls.verify_mode == ssl.CERT_REQUIRED and tls.check_hostname
    assert tls.cert_store_stats()["x509_ca"] > 0  # the CA bundle is loaded
