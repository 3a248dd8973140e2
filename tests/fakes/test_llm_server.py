"""The scripted LLM server speaks the real OpenAI wire format (checked with raw httpx)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import httpx

from tests.fakes.llm_server import FakeLLMServer, Reply, common_prefix_length
from tests.luna_process import REPO

USER = [{"role": "user", "content": "hi"}]


def _sse_events(text: str) -> list:
    out = []
    for line in text.splitlines():
        if line.startswith("data: "):
            data = line[len("data: ") :]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_fake_server_non_streaming_reply(llm_server: FakeLLMServer) -> None:
    llm_server.script(
        Reply(
            content="hello", reasoning="thinking", tool_calls=[{"name": "f", "arguments": {"a": 1}}]
        )
    )
    r = httpx.post(f"{llm_server.url}/chat/completions", json={"model": "m", "messages": USER})
    assert r.status_code == 200
    body = r.json()
    msg = body["choices"][0]["message"]
    assert msg["content"] == "hello"
    assert msg["reasoning_content"] == "thinking"
    assert msg["tool_calls"][0]["function"] == {"name": "f", "arguments": '{"a": 1}'}
    assert body["choices"][0]["finish_reason"] == "tool_calls"
    assert body["usage"]["prompt_tokens"] > 0
    assert llm_server.requests == [{"model": "m", "messages": USER}]


def test_fake_server_streams_sse_with_tool_call_pieces_and_usage(llm_server: FakeLLMServer) -> None:
    llm_server.script(
        Reply(content="abcdefgh", tool_calls=[{"name": "f", "arguments": '{"x": "long value"}'}])
    )
    r = httpx.post(
        f"{llm_server.url}/chat/completions",
        json={"messages": USER, "stream": True, "stream_options": {"include_usage": True}},
    )
    assert r.headers["content-type"].startswith("text/event-stream")
    events = _sse_events(r.text)
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["total_tokens"] > 0
    deltas = [e["choices"][0]["delta"] for e in events[:-2]]
    assert "".join(d.get("content") or "" for d in deltas) == "abcdefgh"
    arg_pieces = [tc["function"]["arguments"] for d in deltas for tc in d.get("tool_calls", [])]
    assert len(arg_pieces) > 2 and "".join(arg_pieces) == '{"x": "long value"}'
    assert events[-3]["choices"][0]["finish_reason"] == "tool_calls"


def test_fake_server_refuses_what_llama_server_refuses(llm_server: FakeLLMServer) -> None:
    null_content = USER + [{"role": "assistant", "content": None}, {"role": "user", "content": "x"}]
    r = httpx.post(f"{llm_server.url}/chat/completions", json={"messages": null_content})
    assert r.status_code == 200  # llama-server accepts null content (llama-cpp-python did not)
    null_reasoning = USER + [{"role": "assistant", "content": "", "reasoning_content": None}]
    r = httpx.post(f"{llm_server.url}/chat/completions", json={"messages": null_reasoning})
    assert r.status_code == 500
    bad_sys = USER + [{"role": "system", "content": "late"}]
    r = httpx.post(f"{llm_server.url}/chat/completions", json={"messages": bad_sys})
    assert r.status_code == 500
    assert "System message" in r.json()["error"]["message"]


def test_fake_server_queue_default_callable_and_errors(llm_server: FakeLLMServer) -> None:
    llm_server.script(
        Reply(status=429),
        lambda body: Reply(content=f"you said {body['messages'][-1]['content']}"),
    )
    url = f"{llm_server.url}/chat/completions"
    assert httpx.post(url, json={"messages": USER}).status_code == 429
    r = httpx.post(url, json={"messages": USER})
    assert r.json()["choices"][0]["message"]["content"] == "you said hi"
    r = httpx.post(url, json={"messages": USER})
    assert r.json()["choices"][0]["message"]["content"] == "ok"
    llm_server.default = Reply(content="changed")
    r = httpx.post(url, json={"messages": USER})
    assert r.json()["choices"][0]["message"]["content"] == "changed"
    assert len(llm_server.requests) == 4
    llm_server.reset()
    assert llm_server.requests == [] and llm_server.pending == 0


def test_fake_server_models_props_health(llm_server: FakeLLMServer) -> None:
    assert httpx.get(f"{llm_server.url}/models").json()["data"][0]["id"] == llm_server.model
    props = httpx.get(f"{llm_server.root_url}/props").json()
    assert props["default_generation_settings"]["n_ctx"] == llm_server.n_ctx
    assert httpx.get(f"{llm_server.root_url}/health").json() == {"status": "ok"}


def test_fake_server_reports_cached_prefix_tokens(llm_server: FakeLLMServer) -> None:
    url = f"{llm_server.url}/chat/completions"
    long = [{"role": "system", "content": "s" * 400}, *USER]
    first = httpx.post(url, json={"messages": long}).json()["usage"]
    second = httpx.post(url, json={"messages": long + USER}).json()["usage"]
    assert first["prompt_tokens_details"]["cached_tokens"] == 0
    assert second["prompt_tokens_details"]["cached_tokens"] >= 100


def test_fake_server_runs_as_standalone_process(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "from file"}]))
    root = REPO
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.llm_server", "--port", "0", "--script", str(script)],
        cwd=root,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline().strip()
        assert line.startswith("READY http://127.0.0.1:"), line
        url = line.split()[1]
        r = httpx.post(f"{url}/chat/completions", json={"messages": USER}, timeout=10)
        assert r.json()["choices"][0]["message"]["content"] == "from file"
    finally:
        proc.terminate()
        assert proc.wait(timeout=10) == 0


def test_fake_server_streams_on_one_kept_alive_connection(llm_server: FakeLLMServer) -> None:
    """As llama-server: chunked streams, so a client reuses its connection (a connection per
    request made every scripted answer pay a connect and a thread)."""
    llm_server.default = Reply(content="ok")
    ports = set()
    with httpx.Client() as client:
        for _ in range(3):
            body = {"model": "m", "messages": USER, "stream": True}
            with client.stream("POST", f"{llm_server.url}/chat/completions", json=body) as r:
                assert r.headers["transfer-encoding"] == "chunked"
                assert "close" not in r.headers.get("connection", "")
                text = r.read().decode()
                ports.add(r.extensions["network_stream"].get_extra_info("client_addr")[1])
            assert _sse_events(text)[-1] == "[DONE]"
    assert len(ports) == 1


def test_fake_server_stream_cut_short_is_an_incomplete_body(llm_server: FakeLLMServer) -> None:
    llm_server.script(Reply(content="a long reply", chunk_size=2, abort_after=3))
    body = {"model": "m", "messages": USER, "stream": True}
    with httpx.stream("POST", f"{llm_server.url}/chat/completions", json=body) as r:
        try:
            r.read()
        except httpx.RemoteProtocolError:
            return  # what a client sees when llama-server dies mid-reply
    raise AssertionError("a cut stream read as complete")


def test_common_prefix_length_matches_a_character_walk() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        a = "".join(rng.choice("ab") for _ in range(rng.randint(0, 12)))
        b = "".join(rng.choice("ab") for _ in range(rng.randint(0, 12)))
        walk = next(
            (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
        )
        assert common_prefix_length(a, b) == walk, (a, b)
