"""Graceful shutdown of the real ``python -m luna`` process: SIGTERM mid-turn when the turn
outlasts ``agent.shutdown_grace`` → the turn is cancelled, MCP servers are stopped, the process
exits 0, the user's message is in the database, and a restart continues the same session.

(A turn that finishes inside the grace period is covered in tests/frontends/test_repl.py.)
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

from luna.config import build_config
from luna.memory import Memory
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.history import prompt_view
from tests.luna_process import clean_env


def write_config(tmp_path: Path, endpoint: str) -> Path:
    (tmp_path / "mcp_servers.json").write_text(
        json.dumps(
            {"servers": {"time": {"command": sys.executable, "args": ["-m", "mcp_server_time"]}}}
        )
    )
    path = tmp_path / "config.toml"
    path.write_text(
        "\n".join(
            [
                "[llm]",
                f'endpoint = "{endpoint}"',
                'model = "fake-model"',
                "max_retries = 0",
                "[memory]",
                f'db_path = "{tmp_path / "data" / "luna.db"}"',
                "librarian = false",
                "[agent]",
                f'workspace = "{tmp_path / "workspace"}"',
                "shutdown_grace = 1.0",
                "[observe]",
                f'log_dir = "{tmp_path / "data" / "logs"}"',
                "[mcp]",
                f'servers_file = "{tmp_path / "mcp_servers.json"}"',
            ]
        )
        + "\n"
    )
    return path


def start_luna(tmp_path: Path, config: Path) -> subprocess.Popen[str]:
    env = clean_env(LUNA_CONFIG=str(config))
    return subprocess.Popen(
        [sys.executable, "-m", "luna", "repl"],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for(predicate, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not reached within {timeout:.0f} s")


def children_of(pid: int) -> set[int]:
    kids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == pid:
            kids.add(int(entry.name))
    return kids


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def history(tmp_path: Path, session: str) -> list[dict]:
    cfg = build_config(
        {}, {"MEMORY_DB_PATH": str(tmp_path / "data" / "luna.db")}, base_dir=tmp_path
    )
    memory = Memory(cfg.memory)
    await memory.open(background=False)
    try:
        return (await prompt_view(memory, session))[1]
    finally:
        await memory.close()


async def test_lifecycle_sigterm_mid_turn_cancels_after_grace_and_restart_resumes(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    config = write_config(tmp_path, llm_server.url)
    # The reply takes far longer than shutdown_grace (1 s): only cancellation ends the turn.
    llm_server.script(Reply(content="never delivered", delay=120))
    proc = start_luna(tmp_path, config)
    assert proc.stdin is not None
    proc.stdin.write("please water the ferns on Tuesday\n")
    proc.stdin.flush()
    wait_for(lambda: len(llm_server.requests) == 1, "the turn's LLM request")
    wait_for(lambda: children_of(proc.pid), "the MCP server process")
    mcp_pids = children_of(proc.pid)

    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=60)  # stdin stays open: only the signal can end the process
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(
            "SIGTERM did not stop Luna (turn not cancelled after the grace)"
        ) from None
    err = proc.stderr.read() if proc.stderr else ""
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    # Children (MCP servers, the embedding worker) get a moment to finish exiting.
    for _ in range(100):
        leftover = [p for p in mcp_pids if alive(p)]
        if not leftover:
            break
        await asyncio.sleep(0.05)
    assert not leftover, "a child process outlived Luna"

    session = (tmp_path / "data" / "repl_session").read_text().strip()
    stored = await history(tmp_path, session)
    assert stored[0]["role"] == "user"
    assert stored[0]["content"].startswith("please water the ferns on Tuesday")
    assert "never delivered" not in json.dumps(stored)
    # The event log was flushed and says the process stopped.
    events = [
        json.loads(line)["event"]
        for f in (tmp_path / "data" / "logs").glob("luna-*.jsonl")
        for line in f.read_text().splitlines()
    ]
    assert "start" in events and "stop" in events

    # Restart: the same session continues, with the earlier message in the prompt.
    llm_server.script(Reply(content="Yes: the ferns, on Tuesday."))
    proc = start_luna(tmp_path, config)
    out, err = proc.communicate("what did I ask you to do?\n", timeout=120)
    assert proc.returncode == 0, err
    assert "Yes: the ferns, on Tuesday." in out
    request = next(
        r
        for r in llm_server.requests
        if "what did I ask you to do?" in json.dumps(r["messages"][-1])
    )
    assert "please water the ferns on Tuesday" in json.dumps(request["messages"])
    assert (tmp_path / "data" / "repl_session").read_text().strip() == session
    stored = await history(tmp_path, session)
    assert [m["role"] for m in stored][-2:] == ["user", "assistant"]
    assert stored[-1]["content"] == "Yes: the ferns, on Tuesday."
