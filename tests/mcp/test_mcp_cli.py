"""``python -m luna mcp ...`` as a real subprocess against real MCP servers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from mcp_helpers import PY, echo_entry

from tests.luna_process import REPO


def run_luna(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    servers = {
        "echo": echo_entry(),
        "time": {"command": "python", "args": ["-m", "mcp_server_time"]},
        "off": {"command": PY, "enabled": False},
    }
    (tmp_path / "servers.json").write_text(json.dumps({"servers": servers}))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "LUNA_MCP_SERVERS": str(tmp_path / "servers.json"),
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
    }
    return subprocess.run(
        [sys.executable, "-m", "luna", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_mcp_cli_list_shows_status_and_tool_counts(tmp_path: Path) -> None:
    proc = run_luna(tmp_path, "mcp", "list")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line.split() for line in proc.stdout.splitlines()[2:]}
    assert rows["echo"][1:3] == ["running", "stdio"]
    assert int(rows["echo"][4]) >= 10
    assert rows["time"][1] == "running" and int(rows["time"][4]) == 2
    assert rows["off"][1] == "disabled"


def test_mcp_cli_tools_and_call(tmp_path: Path) -> None:
    tools = run_luna(tmp_path, "mcp", "tools", "time")
    assert tools.returncode == 0, tools.stderr
    assert "time__get_current_time" in tools.stdout and "echo__" not in tools.stdout
    call = run_luna(tmp_path, "mcp", "call", "echo__add", '{"a": 1, "b": 2}')
    assert (call.returncode, call.stdout.strip()) == (0, "3"), call.stderr
    failed = run_luna(tmp_path, "mcp", "call", "echo__fail", '{"reason": "cli"}')
    assert failed.returncode == 1 and "failed on purpose: cli" in failed.stdout
    bad = run_luna(tmp_path, "mcp", "call", "echo__add", "{not json")
    assert bad.returncode == 2 and "not valid JSON" in bad.stderr
