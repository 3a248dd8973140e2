"""The real ``python -m luna`` REPL as a subprocess against the scripted LLM server."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from luna.config import build_config
from luna.memory import Memory
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.history import prompt_view
from tests.luna_process import data_env


def repl_env(tmp_path: Path, endpoint: str) -> dict[str, str]:
    (tmp_path / "mcp_servers.json").write_text('{"servers": {}}')
    return data_env(tmp_path, endpoint)


def start_repl(tmp_path: Path, endpoint: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "luna", *args],
        cwd=tmp_path,
        env=repl_env(tmp_path, endpoint),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not reached in time")


async def stored_history(tmp_path: Path, session: str | None = None) -> list[dict]:
    cfg = build_config(
        {}, {"MEMORY_DB_PATH": str(tmp_path / "data" / "luna.db")}, base_dir=tmp_path
    )
    memory = Memory(cfg.memory)
    await memory.open(background=False)
    try:
        session = session or (tmp_path / "data" / "repl_session").read_text().strip()
        _, history = await prompt_view(memory, session)
        return history
    finally:
        await memory.close()


def test_repl_piped_stdin_answers_each_line_and_exits_zero(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.script(Reply(content="First answer."), Reply(content="Second answer."))
    proc = start_repl(tmp_path, llm_server.url)
    out, err = proc.communicate("hello\nand again\n", timeout=120)
    assert proc.returncode == 0, err
    assert "First answer." in out and "Second answer." in out
    assert out.index("First answer.") < out.index("Second answer.")
    assert "Traceback" not in err
    assert len(llm_server.requests) == 2
    # The second request carries the first exchange: one session, persisted.
    roles = [m["role"] for m in llm_server.requests[1]["messages"]]
    assert roles == ["system", "user", "assistant", "user"]


def test_repl_commands_and_memories(tmp_path: Path, llm_server: FakeLLMServer) -> None:
    proc = start_repl(tmp_path, llm_server.url)
    script = (
        "/help\n/session\n/remember my bike is a green Brompton\n/memories\n"
        "/memories bikes\n/new\n/session\n/bogus\n/forget 1\n/forget 1\n/memories\n"
        "/quit\nnever sent\n"
    )
    out, err = proc.communicate(script, timeout=120)
    assert proc.returncode == 0, err
    assert "/remember TEXT" in out  # help
    sessions = [line.split()[1] for line in out.splitlines() if line.startswith("session ")]
    assert len(sessions) == 2 and sessions[0] != sessions[1]
    assert "remembered (id" in out
    assert out.count("green Brompton") == 2  # listed, and found by a search for "bikes"
    assert "unknown command /bogus" in out
    assert "remembered (id 1)" in out
    assert "forgotten" in out and "no memory with id 1" in out
    assert out.rstrip().endswith("no memories yet (/remember TEXT adds one)")
    assert llm_server.requests == []  # /quit stopped before "never sent"


def test_repl_memories_query_lists_only_related_memories_one_line_each(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    env = repl_env(tmp_path, llm_server.url)
    for text in ("the dentist is on Tuesday\nat 9, bring the X-rays", "my bike is a Brompton"):
        added = subprocess.run(
            [sys.executable, "-m", "luna", "memory", "add", text],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert added.returncode == 0, added.stderr
    proc = start_repl(tmp_path, llm_server.url)
    out, err = proc.communicate("/memories dentist\n/memories zebra\n/memories\n", timeout=120)
    assert proc.returncode == 0, err
    lines = out.splitlines()
    dentist = "  [1] " + lines[0][6:16] + " the dentist is on Tuesday at 9, bring the X-rays"
    assert lines[0] == dentist  # one line, the newline shown as a space
    assert lines[1] == "no memory is about 'zebra'"  # nothing unrelated fills the list
    assert lines[2].endswith("my bike is a Brompton") and lines[3] == dentist
    assert len(lines) == 4, out


def test_repl_tool_calls_print_inline(tmp_path: Path, llm_server: FakeLLMServer) -> None:
    llm_server.script(
        Reply(
            tool_calls=[
                {
                    "name": "write_file",
                    "arguments": json.dumps({"path": "note.txt", "content": "hi"}),
                }
            ]
        ),
        Reply(content="Saved it."),
    )
    proc = start_repl(tmp_path, llm_server.url)
    out, err = proc.communicate("save a note\n", timeout=120)
    assert proc.returncode == 0, err
    assert "[tool] write_file" in out and "Saved it." in out
    assert (tmp_path / "workspace" / "note.txt").read_text() == "hi"


def test_repl_piped_failed_turn_says_its_error_once_and_exits_1(
    tmp_path: Path, unused_tcp_port: int
) -> None:
    url = f"http://127.0.0.1:{unused_tcp_port}/v1"
    proc = start_repl(tmp_path, url)
    out, err = proc.communicate("hello\n/session\n", timeout=120)
    assert proc.returncode == 1, err  # a script can tell
    # The error once, where the reply would be: no retry warnings, no log line repeating it.
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: cannot reach the LLM"), out
    assert f"127.0.0.1:{unused_tcp_port}" in errors[0]
    assert "cannot reach" not in err and "retry" not in err.lower(), err
    assert "session repl-" in out  # still serving after the failure
    assert "Traceback" not in out + err


async def test_repl_acknowledged_message_survives_kill_9(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.script(Reply(content="too late", delay=60))
    proc = start_repl(tmp_path, llm_server.url)
    assert proc.stdin is not None
    proc.stdin.write("remember the tulip bulbs arrive on Friday\n")
    proc.stdin.flush()
    # The LLM request is sent only after the message is committed.
    wait_for(lambda: len(llm_server.requests) == 1)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    history = await stored_history(tmp_path)
    assert history[0]["role"] == "user"
    assert history[0]["content"].startswith("remember the tulip bulbs arrive on Friday")


async def test_repl_ctrl_c_cancels_turn_not_program(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.script(Reply(content="slow", delay=60), Reply(content="Fast answer."))
    proc = start_repl(tmp_path, llm_server.url)
    assert proc.stdin is not None
    proc.stdin.write("take your time\n")
    proc.stdin.flush()
    wait_for(lambda: len(llm_server.requests) == 1)
    proc.send_signal(signal.SIGINT)
    proc.stdin.write("quick one\n")
    proc.stdin.flush()
    proc.stdin.close()
    out = proc.stdout.read() if proc.stdout else ""
    proc.wait(timeout=60)
    assert proc.returncode == 0
    assert "[cancelled]" in out and "Fast answer." in out
    history = await stored_history(tmp_path)
    texts = [m["content"].split("\n")[0] for m in history]
    assert texts == ["take your time", "quick one", "Fast answer."]


async def test_repl_sigterm_lets_turn_finish_then_exits(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.script(Reply(content="Finished before shutdown.", delay=1.5))
    proc = start_repl(tmp_path, llm_server.url)
    assert proc.stdin is not None
    proc.stdin.write("one more thing\n")
    proc.stdin.flush()
    wait_for(lambda: len(llm_server.requests) == 1)
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=60)  # stdin stays open: only SIGTERM can end it
    out = proc.stdout.read() if proc.stdout else ""
    err = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == 0, err
    assert "Finished before shutdown." in out
    history = await stored_history(tmp_path)
    assert [m["role"] for m in history] == ["user", "assistant"]


@pytest.mark.parametrize("flag", ["--help"])
def test_cli_help_lists_commands(tmp_path: Path, flag: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "luna", flag],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=repl_env(tmp_path, "http://127.0.0.1:9/v1"),
        timeout=60,
    )
    assert proc.returncode == 0
    for command in ("repl", "config", "memory", "mcp", "doctor", "stats"):
        assert command in proc.stdout, command


def test_malformed_discord_token_is_one_line_exit_2_before_any_network(tmp_path: Path) -> None:
    env = repl_env(tmp_path, "http://127.0.0.1:9/v1")
    env["DISCORD_TOKEN"] = "not-a-token"
    proc = subprocess.run(
        [sys.executable, "-m", "luna"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert (
        proc.stderr.count("\n") == 1 and "DISCORD_TOKEN is not a Discord bot token" in proc.stderr
    )
    assert "not-a-token" not in proc.stderr  # the secret is not echoed
