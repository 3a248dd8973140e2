"""The real ``python -m luna`` process: a task survives ``kill -9`` and is delivered once; a
prompt interrupted by ``kill -9`` mid-turn is reported and never run again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from luna.memory.storage.store import Store
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.luna_process import data_env

REMINDER = "⏰ Reminder: call the dentist"


class Luna:
    """One ``python -m luna repl`` with stdin kept open and stdout collected as it comes."""

    def __init__(self, tmp_path: Path, endpoint: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "luna", "repl", "--no-embedded"],
            cwd=tmp_path,
            env=env(tmp_path, endpoint),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def out(self) -> str:
        return "".join(self.lines)

    def wait(self, predicate, what: str) -> None:
        """Until ``predicate()``; a Luna that died meanwhile fails at once, with its stderr."""

        def ready() -> bool:
            if self.proc.poll() is not None and not predicate():
                err = self.proc.stderr.read() if self.proc.stderr else ""
                raise AssertionError(f"{what}: Luna exited {self.proc.returncode}: {err[-2000:]}")
            return predicate()

        wait_for(ready, what)

    def say(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def kill9(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
        self._reader.join(timeout=10)

    def quit(self) -> str:
        """Close stdin (EOF ends the REPL) and return stderr; asserts a clean exit."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        err = self.proc.stderr.read() if self.proc.stderr else ""
        assert self.proc.wait(timeout=90) == 0, err
        self._reader.join(timeout=10)
        assert "Traceback" not in err, err
        return err


def env(tmp_path: Path, endpoint: str) -> dict[str, str]:
    (tmp_path / "mcp_servers.json").write_text('{"servers": {}}')
    config = tmp_path / "config.toml"
    config.write_text(
        '[agent]\ntimezone = "UTC"\n[memory]\nlibrarian = false\n'
        "[llm]\nmax_retries = 0\n[scheduler]\npoll_interval = 1.0\n"
    )
    return data_env(tmp_path, endpoint, LUNA_CONFIG=str(config))


def cli(tmp_path: Path, endpoint: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "luna", "schedule", *args],
        cwd=tmp_path,
        env=env(tmp_path, endpoint),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def wait_for(predicate, what: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not reached within {timeout:.0f} s")


def rows(tmp_path: Path, sql: str) -> list[tuple]:
    store = Store(tmp_path / "data" / "luna.db", load_vec=False)
    try:
        return store.query(sql)
    finally:
        store.close()


def test_process_reminder_survives_kill_9_and_is_delivered_exactly_once(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.script(
        Reply(tool_calls=[{"name": "schedule_task",
                           "arguments": {"text": "call the dentist", "after": "1h"}}]),
        Reply(content="I will remind you in an hour."),
    )  # fmt: skip
    first = Luna(tmp_path, llm_server.url)
    first.say("remind me in an hour to call the dentist")
    first.wait(lambda: "I will remind you in an hour." in first.out, "the scheduling turn")
    assert rows(tmp_path, "SELECT id, state FROM scheduled_tasks") == [(1, "active")]
    first.kill9()
    assert REMINDER not in first.out

    # While Luna is down the owner makes it due now (`luna schedule run-now 1`).
    cli(tmp_path, llm_server.url, "run-now", "1")
    second = Luna(tmp_path, llm_server.url)
    second.wait(lambda: REMINDER in second.out, "the reminder after the restart")
    second.quit()
    assert second.out.count(REMINDER) == 1

    third = Luna(tmp_path, llm_server.url)  # and never again
    third.say("/session")
    third.wait(lambda: "session " in third.out, "the REPL answering")
    third.quit()
    assert REMINDER not in third.out
    assert rows(tmp_path, "SELECT state, runs FROM scheduled_tasks") == [("done", 1)]
    assert rows(tmp_path, "SELECT count(*) FROM deliveries WHERE delivered_at IS NOT NULL") == [
        (1,)
    ]
    listed = json.loads(cli(tmp_path, llm_server.url, "list", "--all", "--json"))
    assert listed["state"] == "done" and listed["last_status"] == "ok"
    session = (tmp_path / "data" / "repl_session").read_text().strip()
    notes = rows(tmp_path, f"SELECT content FROM messages WHERE session_id = '{session}' "
                           "AND role = 'assistant'")  # fmt: skip
    assert notes[-1] == (REMINDER,)  # also written where it was asked


def test_process_prompt_killed_mid_turn_is_reported_and_not_run_again(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    cli(tmp_path, llm_server.url, "add", "check the inbox folder", "--after", "1h", "--prompt")
    cli(tmp_path, llm_server.url, "run-now", "1")
    llm_server.script(Reply(content="never finished", delay=120))

    def scheduled_requests() -> int:
        return sum("[Scheduled task #1" in json.dumps(r) for r in llm_server.requests)

    first = Luna(tmp_path, llm_server.url)
    first.wait(lambda: scheduled_requests() == 1, "the scheduled turn's LLM request")
    first.kill9()

    second = Luna(tmp_path, llm_server.url)
    second.wait(lambda: "was interrupted" in second.out, "the interruption notice")
    second.say("/session")
    second.wait(lambda: "session " in second.out, "the REPL answering")
    second.quit()
    assert "⚠️ Task #1 (check the inbox folder) was interrupted (Luna stopped while it ran)" in (
        second.out
    )
    assert scheduled_requests() == 1  # at most once: the prompt never ran again
    assert rows(tmp_path, "SELECT status FROM task_runs") == [("interrupted",)]
    assert rows(tmp_path, "SELECT state FROM scheduled_tasks") == [("failed",)]
