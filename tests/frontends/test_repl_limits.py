"""The real ``python -m luna`` REPL at its limits: the round limit, a silent model, a model that
sends only keep-alives. The user always gets a word, and the session goes on.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.luna_process import data_env


def run_repl(tmp_path: Path, endpoint: str, config: str, stdin: str) -> tuple[str, str, float]:
    (tmp_path / "mcp_servers.json").write_text('{"servers": {}}')
    (tmp_path / "config.toml").write_text(config)
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "luna"],
        cwd=tmp_path,
        env=data_env(tmp_path, endpoint),
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )
    failed = any(line.startswith("error:") for line in proc.stdout.splitlines())
    assert proc.returncode == (1 if failed else 0), proc.stderr  # piped: a failed turn exits 1
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc.stdout, proc.stderr, time.monotonic() - started


def stored(tmp_path: Path) -> list[tuple[str, str]]:
    with sqlite3.connect(tmp_path / "data" / "luna.db") as conn:
        return list(conn.execute("SELECT role, content FROM messages ORDER BY id"))


def test_repl_round_limit_tells_the_user_when_the_wrap_up_wants_tools(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    call = {"name": "read_file", "arguments": json.dumps({"path": "notes.txt"})}
    again = {"name": "write_file", "arguments": json.dumps({"path": "a.txt", "content": "x"})}
    llm_server.script(
        Reply(tool_calls=[call]),
        Reply(tool_calls=[again]),  # the wrap-up, sent without tools, asks for one anyway
        Reply(content="Picking up where I left off."),
    )
    out, _, _ = run_repl(
        tmp_path, llm_server.url, "[agent]\nmax_rounds = 1\n", "do it all\ncontinue\n"
    )
    note = (
        "(I used all 1 tool rounds for this message before finishing. It still wanted to "
        "run: write_file. Ask me to continue and I will pick up from here.)"
    )
    assert note in out, out
    assert out.index(note) < out.index("Picking up where I left off.")
    assert not (tmp_path / "workspace" / "a.txt").exists()  # the wrap-up's call never ran
    replies = [c for role, c in stored(tmp_path) if role == "assistant" and c]
    assert replies == [note, "Picking up where I left off."]
    assert not llm_server.requests[1].get("tools")


SLOW = "[llm]\nfirst_byte_timeout = 2.0\ntimeout = 5.0\nmax_retries = 0\n"


def test_repl_silent_model_shows_waiting_then_a_clear_error(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.script(Reply(content="far too late", delay=40), Reply(content="Back again."))
    out, _, elapsed = run_repl(tmp_path, llm_server.url, SLOW, "hello?\nstill there?\n")
    lines = out.splitlines()
    waiting = [i for i, line in enumerate(lines) if line.startswith("  [waiting for the model")]
    errors = [i for i, line in enumerate(lines) if line.startswith("error:")]
    assert len(waiting) == 1 and len(errors) == 1 and waiting[0] < errors[0], out
    assert "Luna gives up after 2 s without a first byte" in lines[waiting[0]]
    assert "sent nothing for 2s (llm.first_byte_timeout" in lines[errors[0]], out
    assert "Back again." in out and elapsed < 35
    users = [c.split("\n")[0] for role, c in stored(tmp_path) if role == "user"]
    assert users == ["hello?", "still there?"]


def test_repl_keepalive_only_model_is_stopped_by_llm_timeout(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.script(
        Reply(content="never", pings=60, ping_interval=0.5), Reply(content="Here now.")
    )
    out, _, elapsed = run_repl(tmp_path, llm_server.url, SLOW, "hello?\nand now?\n")
    assert "  [waiting for the model to answer" in out, out
    error = next(line for line in out.splitlines() if line.startswith("error:"))
    assert "did not finish within 5s (llm.timeout" in error, out
    assert "Here now." in out and elapsed < 25
