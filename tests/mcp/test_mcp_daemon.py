"""A stdio MCP server killed during a call while Luna runs as a daemon (``python -m luna web``,
driven over its OpenAI-compatible API with the real ``openai`` SDK, the model scripted): the
side effect happens once, the model is told the call may or may not have taken effect (and
never gets a rerun's result), and the next call works once the server has restarted."""

from __future__ import annotations

import json
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from mcp_helpers import ECHO, PY, child_pids
from openai import OpenAI

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.web.conftest import TOKEN
from tests.frontends.web.process import LunaWebProcess


def _call(arguments: dict[str, Any], call_id: str) -> Reply:
    call = {"name": "e__note", "arguments": json.dumps(arguments), "id": call_id}
    return Reply(tool_calls=[call])


def _results(requests: list[dict[str, Any]]) -> dict[str, str]:
    return {
        m["tool_call_id"]: m["content"]
        for r in requests
        for m in r["messages"]
        if m["role"] == "tool"
    }


def _echo_servers(luna: LunaWebProcess) -> set[int]:
    """The pids of the echo servers running under the daemon."""
    assert luna.proc is not None
    found = set()
    for pid in child_pids(luna.proc.pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "echo_server.py" in cmdline:
            found.add(pid)
    return found


def _wait_for(path: Path, seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.05)


def test_mcp_daemon_stdio_server_killed_mid_call_runs_it_once_and_comes_back(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    notes = tmp_path / "notes.txt"
    luna = LunaWebProcess(tmp_path, llm_server.url)
    servers = {"e": {"command": PY, "args": [ECHO], "timeout": 60}}
    (tmp_path / "mcp_servers.json").write_text(json.dumps({"servers": servers}))
    told = "The notes server stopped during the call; the note may or may not be written."
    llm_server.script(
        _call({"path": str(notes), "text": "first", "seconds": 60}, "c1"),
        Reply(content=told),
        _call({"path": str(notes), "text": "second"}, "c2"),
        Reply(content="Noted."),
    )
    first_ask = {"role": "user", "content": "note 'first'"}
    luna.start()
    try:
        client = OpenAI(api_key=TOKEN, base_url=f"{luna.url}/v1", max_retries=0, timeout=120)
        with ThreadPoolExecutor(1) as pool:
            first = pool.submit(
                client.chat.completions.create, model="luna", messages=[first_ask], user="d"
            )
            _wait_for(notes)  # the side effect happened; the server sleeps before answering
            (killed,) = _echo_servers(luna)
            os.kill(killed, signal.SIGKILL)
            reply = first.result(timeout=120).choices[0].message.content
        second = client.chat.completions.create(
            model="luna",
            messages=[
                first_ask,
                {"role": "assistant", "content": reply},
                {"role": "user", "content": "note 'second'"},
            ],
            user="d",
        )
        assert second.choices[0].message.content == "Noted."
        restarted = _echo_servers(luna)
    finally:
        assert luna.stop() == 0, "".join(luna.stderr)
    assert reply == told
    results = _results(llm_server.requests)
    assert "The MCP server 'e' stopped while running e__note" in results["c1"]
    assert "may or may not have taken effect" in results["c1"]
    assert "did not run it again" in results["c1"]
    assert "second" in results["c2"] and "stopped" not in results["c2"]
    assert notes.read_text().splitlines() == ["first", "second"]  # each call ran once
    assert len(restarted) == 1 and killed not in restarted  # started again, once
