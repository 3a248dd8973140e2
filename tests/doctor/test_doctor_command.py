"""``python -m luna doctor`` as a subprocess against the scripted LLM server: what a person
running it sees, and when."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.luna_process import data_env

SLOW_S = 14.0  # the tool-call probe's answer: longer than one WAITING_NOTICE_S


def test_doctor_prints_each_group_as_it_finishes(tmp_path: Path, llm_server: FakeLLMServer) -> None:
    llm_server.default = Reply(content="ok")
    llm_server.script(Reply(content="no tools here", delay=SLOW_S))  # llm's first probe
    (tmp_path / "mcp_servers.json").write_text('{"servers": {}}')
    proc = subprocess.Popen(
        [sys.executable, "-m", "luna", "doctor", "--only", "llm", "--only", "disk"],
        cwd=tmp_path,
        env=data_env(tmp_path, llm_server.url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    start = time.monotonic()
    first = proc.stdout.readline()
    first_at = time.monotonic() - start
    out = first + proc.stdout.read()
    err = proc.stderr.read()
    proc.wait(timeout=120)
    # disk comes after llm in the list, but does not wait for it.
    assert "data folder" in first and first_at < SLOW_S, (first, first_at)
    assert out.index("data folder") < out.index("tool calls"), out
    assert "still checking llm" in err, err


def _doctor_llm(tmp_path: Path, llm_server: FakeLLMServer) -> str:
    (tmp_path / "mcp_servers.json").write_text('{"servers": {}}')
    proc = subprocess.run(
        [sys.executable, "-m", "luna", "doctor", "--only", "llm"],
        cwd=tmp_path,
        env=data_env(tmp_path, llm_server.url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the tool-call check failed
    (fix,) = [line for line in proc.stdout.splitlines() if "fix:" in line and "tool" in line]
    return fix


def test_doctor_tells_a_model_that_cannot_call_tools_from_a_missing_jinja(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.default = Reply(content="Sure! Pinging now.")  # no call, none written as text
    llm_server.supports_tool_calls = True  # the server was started with --jinja
    fix = _doctor_llm(tmp_path, llm_server)
    assert "cannot call tools" in fix and "start llama-server with --jinja" not in fix, fix
    llm_server.supports_tool_calls = False  # a template without tool calling
    (tmp_path / "b").mkdir()
    fix = _doctor_llm(tmp_path / "b", llm_server)
    assert "chat template has no tool calling" in fix, fix
    llm_server.supports_tool_calls = None  # the server does not say: the flag is the suspect
    llm_server.default = Reply(content='<tool_call>{"name": "ping"}</tool_call>')
    (tmp_path / "c").mkdir()
    assert "start llama-server with --jinja" in _doctor_llm(tmp_path / "c", llm_server)


def test_doctor_refuses_a_config_start_up_would_refuse(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text('[scheduler]\nheartbeat = true\nheartbeat_cron = "x"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "luna", "doctor", "--only", "config"],
        cwd=tmp_path,
        env=data_env(tmp_path, "http://127.0.0.1:9/v1"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stdout  # was: "Luna is ready." and exit 0
    assert "Luna will not start" in proc.stdout and "scheduler.heartbeat_cron" in proc.stdout
