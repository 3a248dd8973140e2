"""The web front-end inside the real process: SIGTERM lets a streaming reply finish, ends the
page's event streams and exits 0; the web runs next to the REPL when ``[web] enabled``."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.web.conftest import TOKEN
from tests.frontends.web.process import URL_RE, LunaWebProcess
from tests.luna_process import data_env

AUTH = {"Authorization": f"Bearer {TOKEN}"}
pytestmark = pytest.mark.timeout(300)


async def test_sigterm_finishes_the_running_stream_then_exits_zero(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    proc = LunaWebProcess(tmp_path, llm_server.url, "[agent]\nshutdown_grace = 20.0\n").start()
    try:
        reply = "a slow but complete answer " * 4
        llm_server.script(Reply(content=reply, chunk_size=4, chunk_delay=0.05))
        async with httpx.AsyncClient(base_url=proc.url, headers=AUTH, timeout=60) as client:
            async with client.stream("GET", "/api/events") as events:
                body = {
                    "model": "luna",
                    "stream": True,
                    "messages": [{"role": "user", "content": "talk slowly"}],
                }
                async with client.stream("POST", "/v1/chat/completions", json=body) as chat:
                    lines = chat.aiter_lines()
                    first = await anext(lines)
                    assert first.startswith("data: ")
                    assert proc.proc is not None
                    proc.proc.send_signal(signal.SIGTERM)  # mid-reply
                    rest = [line async for line in lines]
                assert "data: [DONE]" in rest
                text = "".join(
                    json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                    for line in [first, *rest]
                    if line.startswith("data: {") and '"choices": [{' in line
                )
                assert text == reply
                # The page's event stream ends by itself when Luna stops.
                async with asyncio.timeout(30):
                    async for _ in events.aiter_lines():
                        pass
        started = time.monotonic()
        assert proc.proc.wait(timeout=60) == 0, "".join(proc.stderr)
        assert time.monotonic() - started < 30
        assert "Traceback" not in "".join(proc.stderr)
    finally:
        proc.stop()


def test_web_runs_next_to_the_repl_when_enabled(tmp_path: Path, llm_server: FakeLLMServer) -> None:
    (tmp_path / "mcp_servers.json").write_text('{"servers": {}}')
    (tmp_path / "config.toml").write_text("[web]\nenabled = true\nport = 0\n")
    env = data_env(
        tmp_path,
        llm_server.url,
        LUNA_WEB_TOKEN=TOKEN,
        LUNA_CONFIG=str(tmp_path / "config.toml"),
    )
    llm_server.script(Reply(content="hello from the terminal"))
    repl = subprocess.Popen(
        [sys.executable, "-m", "luna", "--no-embedded"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert repl.stderr is not None and repl.stdin is not None and repl.stdout is not None
    url = ""
    deadline = time.monotonic() + 120
    while not url and time.monotonic() < deadline:
        line = repl.stderr.readline()
        if not line:
            break
        if m := URL_RE.search(line):
            url = m.group(1)
    assert url, "the web front-end did not start next to the REPL"
    models = httpx.get(f"{url}/v1/models", headers=AUTH, timeout=30)
    assert models.json()["data"][0]["id"] == "luna"
    out, _ = repl.communicate("hi\n", timeout=120)  # EOF ends the REPL, and the web with it
    assert repl.returncode == 0 and "hello from the terminal" in out
    # Without a token, the same configuration refuses to start at all.
    env.pop("LUNA_WEB_TOKEN")
    refused = subprocess.run(
        [sys.executable, "-m", "luna", "--no-embedded"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        input="",
    )
    assert refused.returncode == 2 and "LUNA_WEB_TOKEN is not set" in refused.stderr
