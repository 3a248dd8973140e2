"""A session's tool set through the real ``python -m luna`` REPL and real MCP servers.

The head (the tool declarations) is fixed at the session's first turn: a server that is still
starting is waited for, a server that crashes, restarts or adds tools changes nothing in it,
and a Luna restart finds the same head in the database.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from mcp_helpers import ECHO, PY

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.luna_process import data_env


def _call(name: str, arguments: dict[str, Any], call_id: str) -> Reply:
    return Reply(tool_calls=[{"name": name, "arguments": json.dumps(arguments), "id": call_id}])


def _run_repl(tmp_path: Path, url: str, servers: dict[str, Any], lines: list[str]) -> str:
    (tmp_path / "mcp_servers.json").write_text(json.dumps({"servers": servers}))
    proc = subprocess.run(
        [sys.executable, "-m", "luna", "repl"],
        cwd=tmp_path,
        env=data_env(tmp_path, url),
        input="".join(f"{line}\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc.stdout


def _tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


def _results(request: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in request["messages"] if m["role"] == "tool"}


def test_mcp_head_first_piped_line_waits_for_a_slow_server(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    # The server answers nothing for 1 s after it starts, initialize included; three lines are
    # piped in at once, so the first turn starts long before the server is up.
    starts = tmp_path / "starts.txt"
    env = {"ECHO_START_DELAY": "1", "ECHO_STARTS": str(starts)}
    slow = {"command": PY, "args": [ECHO], "env": env, "timeout": 30}
    llm_server.script(
        _call("slow__add", {"a": 40, "b": 2}, "c1"),
        Reply(content="It is 42."),
        Reply(content="Second."),
        Reply(content="Third."),
    )
    out = _run_repl(tmp_path, llm_server.url, {"slow": slow}, ["add 40 and 2", "more", "more"])
    requests = llm_server.requests
    assert len(requests) == 4 and "It is 42." in out
    assert "slow__add" in _tool_names(requests[0])
    assert all(r["tools"] == requests[0]["tools"] for r in requests)
    assert "42" in _results(requests[1])["c1"] and "Unknown tool" not in _results(requests[1])["c1"]
    # One process: the one started right after the lock (luna.mcp.launch.prelaunch) is the one
    # the session talks to, not a second one started when the MCP manager came up.
    assert len(starts.read_text().split()) == 1


def test_mcp_head_is_kept_through_new_tools_a_crash_and_a_restart(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    flag = tmp_path / "broken.flag"  # while it exists the echo server refuses to start
    echo = {"command": PY, "args": [ECHO], "env": {"ECHO_FLAG": str(flag)}, "timeout": 30}

    def repaired(body: dict[str, Any]) -> Reply:
        flag.unlink()  # the server can start again from here on
        return _call("echo__add", {"a": 40, "b": 2}, "c6")

    llm_server.script(
        _call("echo__add_tool", {"name": "extra"}, "c1"),  # the server's list grows
        Reply(content="Added."),
        _call("list_available_tools", {"query": "extra"}, "c2"),
        _call("use_tool", {"name": "echo__extra"}, "c3"),
        Reply(content="Used it."),
        _call("echo__break_server", {}, "c4"),  # it dies, and cannot restart
        Reply(content="It broke."),
        _call("echo__add", {"a": 1, "b": 1}, "c5"),
        Reply(content="Still down."),
        repaired,
        Reply(content="Back: 42."),
    )
    lines = ["add a tool", "use it", "break it", "add 1 and 1", "add 40 and 2"]
    out = _run_repl(tmp_path, llm_server.url, {"echo": echo}, lines)
    requests = llm_server.requests
    assert len(requests) == 11 and "Back: 42." in out
    declared = _tool_names(requests[0])
    assert "echo__add" in declared and "echo__extra" not in declared
    # One head for the whole session: byte-identical through the new tool, the crash, the
    # failed restarts and the restart that worked.
    assert all(r["tools"] == requests[0]["tools"] for r in requests)
    results: dict[str, str] = {}
    for r in requests:
        results.update(_results(r))
    assert "echo__extra" in results["c2"]  # the tool that came later is in the catalog ...
    assert "I am extra" in results["c3"]  # ... and use_tool reaches it
    assert "not running" in results["c5"] and "Unknown tool" not in results["c5"]
    assert "42" in results["c6"]


def test_mcp_head_survives_a_luna_restart_with_its_server_down(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    flag = tmp_path / "broken.flag"
    echo = {"command": PY, "args": [ECHO], "env": {"ECHO_FLAG": str(flag)}, "timeout": 30}
    llm_server.script(Reply(content="Hello."))
    _run_repl(tmp_path, llm_server.url, {"echo": echo}, ["hi"])
    first = llm_server.requests[0]
    flag.write_text("broken")  # the next Luna finds the server failing at start
    llm_server.script(_call("echo__add", {"a": 1, "b": 1}, "c1"), Reply(content="Down."))
    out = _run_repl(tmp_path, llm_server.url, {"echo": echo}, ["add 1 and 1"])
    again = llm_server.requests[1:]
    assert "Down." in out
    assert [r["tools"] for r in again] == [first["tools"]] * 2  # the session's head, kept
    result = _results(again[1])["c1"]
    assert "not running" in result and "echo" in result and "Unknown tool" not in result
