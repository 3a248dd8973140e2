"""MCP servers that write what is not JSON-RPC to stdout: real subprocesses, real CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from mcp_helpers import PY, SERVERS

from tests.luna_process import REPO

GARBAGE = str(SERVERS / "garbage_server.py")
BANNER = str(SERVERS / "banner_server.py")


def mcp_list(tmp_path: Path, servers: dict) -> tuple[subprocess.CompletedProcess[str], float]:
    (tmp_path / "servers.json").write_text(json.dumps({"servers": servers}))
    env = {
        "PATH": os.environ.get("PATH", ""),
        "HOME": str(tmp_path),
        "LUNA_MCP_SERVERS": str(tmp_path / "servers.json"),
        "MEMORY_DB_PATH": str(tmp_path / "data" / "luna.db"),
        "LOG_DIR": str(tmp_path / "logs"),
        "PYTHONPATH": str(REPO),
        "HF_HUB_OFFLINE": "1",
    }
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "luna", "mcp", "list"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc, time.monotonic() - started


def test_mcp_server_writing_garbage_fails_fast_in_one_line(tmp_path: Path) -> None:
    proc, elapsed = mcp_list(tmp_path, {"garbage": {"command": PY, "args": [GARBAGE]}})
    assert proc.returncode == 0, proc.stderr
    assert elapsed < 15, f"took {elapsed:.1f} s (mcp.start_timeout is 30 s)"
    row = next(line for line in proc.stdout.splitlines() if line.startswith("garbage "))
    assert "failed" in row and "timed out" not in row, row
    assert "it does not speak MCP on stdout: it wrote 'Server starting... {not json: 0}" in row
    # No pydantic dump: at most the one warning line, and no control bytes from the server.
    assert len(proc.stderr.strip().splitlines()) <= 1, proc.stderr
    assert "Traceback" not in proc.stderr and "validation error" not in proc.stderr
    assert "\x00" not in proc.stdout + proc.stderr


def test_mcp_server_with_one_stray_banner_line_still_works(tmp_path: Path) -> None:
    proc, _ = mcp_list(tmp_path, {"banner": {"command": PY, "args": [BANNER]}})
    assert proc.returncode == 0, proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("banner "))
    assert "running" in row and "failed" not in row, row
    assert "Traceback" not in proc.stderr
