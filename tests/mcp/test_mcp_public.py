"""Luna against public MCP servers nobody here wrote, through its real entry points.

``@modelcontextprotocol/server-everything`` (npm), ``mcp-server-fetch`` (PyPI) and the
official Python SDK's own server (tests/mcp/servers/echo_server.py): a server killed during a
call with a side effect (the side effect happens exactly once, and the model or the CLI user
is told the call may have taken effect), an HTTP server restarted between two turns of one
session (its session is re-opened, its head unchanged), a resource read by URI after a
resource link (a text blob decoded), progress that outlives the call timeout and reaches the turn as
Status lines, and an answer over the reader's limit.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import child_pids, echo_entry, wait_until
from public_servers import SlowPage, everything_command, http_server
from test_mcp_manager import ctx, started

from luna.agent import Agent
from luna.llm import LLMClient
from luna.mcp import rpc
from luna.memory import Memory
from luna.messages import InboundMessage, Status, ToolCall, TurnDone
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.luna_process import data_env

FETCH = {
    "command": "python",
    "args": ["-m", "mcp_server_fetch", "--ignore-robots-txt", "--allow-private-ips"],
    "timeout": 60,
}


def _call(name: str, arguments: dict[str, Any], call_id: str) -> Reply:
    return Reply(tool_calls=[{"name": name, "arguments": json.dumps(arguments), "id": call_id}])


def _results(requests: list[dict[str, Any]]) -> dict[str, str]:
    return {
        m["tool_call_id"]: m["content"]
        for r in requests
        for m in r["messages"]
        if m["role"] == "tool"
    }


def _luna(tmp_path: Path, servers: dict[str, Any], *args: str) -> subprocess.Popen[str]:
    (tmp_path / "mcp_servers.json").write_text(json.dumps({"servers": servers}))
    return subprocess.Popen(
        [sys.executable, "-m", "luna", *args],
        cwd=tmp_path,
        env=data_env(tmp_path, "http://127.0.0.1:9/v1"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _repl(tmp_path: Path, url: str, servers: dict[str, Any], lines: list[str]) -> str:
    (tmp_path / "mcp_servers.json").write_text(json.dumps({"servers": servers}))
    proc = subprocess.run(
        [sys.executable, "-m", "luna", "repl"],
        cwd=tmp_path,
        env=data_env(tmp_path, url),
        input="".join(f"{line}\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def _kill_server_of(cli: subprocess.Popen[str], marker: str) -> None:
    """SIGKILL the server process ``cli`` started (found by ``marker`` in its command line)."""
    for pid in child_pids(cli.pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            os.kill(pid, signal.SIGKILL)
            return
    raise AssertionError(f"no {marker} process under the CLI")


def test_public_stdio_fetch_killed_mid_fetch_fetches_once_and_says_so(tmp_path: Path) -> None:
    with SlowPage(seconds=6) as page:
        cli = _luna(
            tmp_path, {"fetch": FETCH}, "mcp", "call", "fetch__fetch", json.dumps({"url": page.url})
        )
        assert page.asked.wait(60), "mcp-server-fetch never requested the page"
        _kill_server_of(cli, "mcp_server_fetch")
        out, err = cli.communicate(timeout=120)
        requests = page.requests
    assert cli.returncode == 1, err
    assert "stopped while running fetch__fetch" in out
    assert "may or may not have taken effect" in out and "did not run it again" in out
    assert requests == 1


def test_public_http_server_killed_mid_call_runs_its_side_effect_once(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    with http_server("echo") as server:
        arguments = {"path": str(notes), "text": "one side effect", "seconds": 10}
        cli = _luna(
            tmp_path,
            {"h": {"url": server.url, "timeout": 30}},
            "mcp",
            "call",
            "h__note",
            json.dumps(arguments),
        )
        asyncio.run(wait_until(notes.exists, "the side effect"))
        server.kill()
        out, err = cli.communicate(timeout=120)
    assert cli.returncode == 1, err
    assert "stopped while running h__note" in out and "may or may not have taken effect" in out
    assert notes.read_text().splitlines() == ["one side effect"]


@pytest.mark.parametrize(
    ("kind", "arguments", "answer"),
    [
        ("echo", {"text": "hi"}, "hi"),  # the Python SDK's server: HTTP 404 for the old session
        ("everything", {"message": "hi"}, "Echo: hi"),  # server-everything: HTTP 400
    ],
)
def test_public_http_server_restarted_between_turns_reopens_the_session(
    tmp_path: Path, llm_server: FakeLLMServer, kind: str, arguments: dict[str, Any], answer: str
) -> None:
    with http_server(kind) as server:

        def restarted(_body: dict[str, Any]) -> Reply:
            server.restart()  # between the turns: Luna's session is unknown to the new server
            return _call("h__echo", arguments, "c2")

        llm_server.script(
            _call("h__echo", arguments, "c1"),
            Reply(content="First."),
            restarted,
            Reply(content="Second."),
        )
        servers = {"h": {"url": server.url, "timeout": 30}}
        out = _repl(tmp_path, llm_server.url, servers, ["echo hi", "again"])
    requests = llm_server.requests
    assert "Second." in out and len(requests) == 4
    results = _results(requests)
    assert answer in results["c1"] and answer in results["c2"]
    assert "not running" not in results["c2"] and "error" not in results["c2"].lower()
    assert all(r["tools"] == requests[0]["tools"] for r in requests)  # one head, unchanged


def test_public_resource_link_is_read_by_uri_and_a_text_blob_decoded(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    blob_uri = "demo://resource/dynamic/blob/1"
    llm_server.script(
        _call("everything__get-resource-links", {"count": 2}, "c1"),
        _call("mcp_read_resource", {"server": "everything", "uri": blob_uri}, "c2"),
        Reply(content="Read it."),
    )
    servers = {"everything": {"command": everything_command(), "args": ["stdio"], "timeout": 30}}
    out = _repl(tmp_path, llm_server.url, servers, ["read the first linked resource"])
    assert "Read it." in out
    results = _results(llm_server.requests)
    # The link says how to read it, with the server's own URI ...
    assert f"mcp_read_resource(server='everything', uri='{blob_uri}')" in results["c1"]
    # ... and the blob (text/plain, base64) arrives as its text.
    assert "Resource 1: This is a base64 blob created at" in results["c2"]
    assert "mcp_read_resource" in [t["function"]["name"] for t in llm_server.requests[0]["tools"]]


def test_public_cli_lists_a_servers_resources(tmp_path: Path) -> None:
    servers = {"everything": {"command": everything_command(), "args": ["stdio"]}}
    cli = _luna(tmp_path, servers, "mcp", "resources")
    out, err = cli.communicate(timeout=120)
    assert cli.returncode == 0, err
    assert "everything  demo://resource/static/document/architecture.md" in out


async def test_public_long_running_operation_progress_outlives_the_call_timeout(
    mcp_cfg, mcp_manager
) -> None:
    everything = {"command": everything_command(), "args": ["stdio"], "timeout": 2}
    manager, registry = await started(mcp_manager, mcp_cfg({"everything": everything}))
    lines: list[str] = []
    call = ToolCall(
        "c1", "everything__trigger-long-running-operation", '{"duration": 5, "steps": 5}'
    )
    turn = ctx()
    turn.on_progress = lines.append
    result = await registry.execute(call, turn)
    # 5 s of work against a 2 s timeout: each step's progress renewed it.
    assert not result.is_error and "Long running operation completed" in result.content
    assert lines[0] == "everything__trigger-long-running-operation: 20%"
    assert len(lines) >= 3


async def test_public_progress_stops_at_max_call_timeout(mcp_cfg, mcp_manager) -> None:
    everything = {"command": everything_command(), "args": ["stdio"], "timeout": 2}
    cfg = mcp_cfg({"everything": everything}, {"mcp": {"max_call_timeout": 3}})
    manager, _ = await started(mcp_manager, cfg)
    arguments = {"duration": 10, "steps": 10}
    result = await manager.call("everything__trigger-long-running-operation", arguments)
    assert result.is_error and "mcp.max_call_timeout" in result.content
    assert "cancelled" in result.content


async def test_public_answer_over_the_reader_limit_is_told_and_never_rerun(
    mcp_cfg, mcp_manager, tmp_path, monkeypatch
) -> None:
    monkeypatch.setattr(rpc, "MAX_LINE", 2**20)  # 1 MB, so the answer need not be 64 MB
    notes = tmp_path / "notes.txt"
    manager, _ = await started(mcp_manager, mcp_cfg({"echo": echo_entry()}))
    arguments = {"path": str(notes), "text": "ran", "lines": 60_000}  # about 1.8 MB
    result = await manager.call("echo__note", arguments)
    assert result.is_error and "over Luna's limit of 1 MB" in result.content
    assert "did not run it again" in result.content and "ask for less" in result.content
    assert notes.read_text().splitlines() == ["ran"]
    await wait_until(lambda: manager.status()[0].state == "running", "the restart")


async def test_public_long_running_operation_progress_reaches_the_turn_as_status(
    mcp_cfg, mcp_manager, llm_server: FakeLLMServer
) -> None:
    everything = {"command": everything_command(), "args": ["stdio"], "timeout": 2}
    cfg = mcp_cfg({"everything": everything})
    manager, registry = await started(mcp_manager, cfg)
    memory = Memory(cfg.memory)
    await memory.open(background=False)
    llm = LLMClient(cfg.llm)
    name = "everything__trigger-long-running-operation"
    llm_server.script(_call(name, {"duration": 3, "steps": 3}, "c1"), Reply(content="Done."))
    try:
        agent = Agent(cfg, llm, memory, registry)
        msg = InboundMessage(session_id="progress", text="run the long operation")
        events = [e async for e in agent.run_turn(msg)]
    finally:
        await llm.close()
        await memory.close()
    # The REPL, Discord and the page show these like a long prefill's progress.
    shown = [e.text for e in events if isinstance(e, Status) and e.kind == "progress"]
    assert shown[0] == f"{name}: 33%" and len(shown) >= 2  # at most one a second
    assert isinstance(events[-1], TurnDone) and events[-1].reply == "Done."
