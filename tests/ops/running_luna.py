"""A real ``python -m luna`` for the reliability tests: a REPL kept running with stdin open,
and one-shot CLI commands, all on one data folder under ``tmp_path``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from tests.luna_process import data_env


def luna_env(tmp_path: Path, endpoint: str, **extra: str) -> dict[str, str]:
    mcp = tmp_path / "mcp_servers.json"
    if not mcp.exists():
        mcp.write_text('{"servers": {}}')
    return data_env(tmp_path, endpoint, **extra)


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what}: not reached within {timeout:.0f} s")


class RunningLuna:
    """``python -m luna repl`` (or other args) with stdin open; stdout/stderr collected."""

    def __init__(self, tmp_path: Path, endpoint: str, *args: str, **env: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "luna", *(args or ("repl", "--no-embedded"))],
            cwd=tmp_path,
            env=luna_env(tmp_path, endpoint, **env),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.out_lines: list[str] = []
        self.err_lines: list[str] = []
        for stream, sink in (
            (self.proc.stdout, self.out_lines),
            (self.proc.stderr, self.err_lines),
        ):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    @staticmethod
    def _pump(stream, sink: list[str]) -> None:
        for line in stream:
            sink.append(line)

    @property
    def out(self) -> str:
        return "".join(self.out_lines)

    @property
    def err(self) -> str:
        return "".join(self.err_lines)

    def wait(self, predicate: Callable[[], bool], what: str, timeout: float = 90.0) -> None:
        """Until ``predicate()``; a Luna that exited meanwhile fails at once, with its stderr."""

        def ready() -> bool:
            if predicate():
                return True
            if self.proc.poll() is not None:
                time.sleep(0.2)  # let the pumps drain
                if predicate():
                    return True
                raise AssertionError(
                    f"{what}: Luna exited {self.proc.returncode}: {self.err[-3000:]}"
                )
            return False

        wait_for(ready, what, timeout)

    def say(self, text: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def ready(self) -> None:
        """Wait until the REPL answers a command (it is up, its database open)."""
        before = self.out.count("session ")
        self.say("/session")
        self.wait(lambda: self.out.count("session ") > before, "the REPL answering /session")

    def quit(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.say("/quit")
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill9()
            raise

    def kill9(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)


def run_luna(
    tmp_path: Path, endpoint: str, *args: str, input: str | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """One ``python -m luna ARGS`` to completion."""
    return subprocess.run(
        [sys.executable, "-m", "luna", *args],
        cwd=tmp_path,
        env=luna_env(tmp_path, endpoint),
        input=input,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
