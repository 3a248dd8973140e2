"""A real ``python -m luna web`` process for browser and load tests, and where artifacts go.

Invariants:
- The child sees only the test's data folders, the scripted LLM server and ``LUNA_WEB_TOKEN``
  (``tests.luna_process.data_env``); it listens on a free port on 127.0.0.1 and the harness
  reads the URL from its one ``web:`` line on stderr.
- Stopping sends SIGTERM and waits; a child that does not stop is killed and the test fails.
- Screenshots and figures go to ``test-artifacts/web/`` at the repository root (or
  ``$LUNA_TEST_ARTIFACTS``), kept after the run for people to look at.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.frontends.web.conftest import TOKEN
from tests.luna_process import REPO, data_env

URL_RE = re.compile(r"web: Luna's page and API at (http://\S+?)/? ")


def artifacts_dir() -> Path:
    folder = Path(os.environ.get("LUNA_TEST_ARTIFACTS") or REPO / "test-artifacts") / "web"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class LunaWebProcess:
    """``python -m luna web`` in ``folder`` against the LLM at ``endpoint``."""

    def __init__(self, folder: Path, endpoint: str, config: str = "") -> None:
        self.folder = folder
        (folder / "mcp_servers.json").write_text('{"servers": {}}')
        (folder / "config.toml").write_text("[web]\nport = 0\n" + config)
        self.env = data_env(
            folder,
            endpoint,
            LUNA_WEB_TOKEN=TOKEN,
            LUNA_CONFIG=str(folder / "config.toml"),
        )
        self.stderr: list[str] = []
        self.url = ""
        self.proc: subprocess.Popen[str] | None = None

    @property
    def workspace(self) -> Path:
        return self.folder / "workspace"

    @property
    def log_dir(self) -> Path:
        return self.folder / "data" / "logs"

    @property
    def db_path(self) -> Path:
        return self.folder / "data" / "luna.db"

    def start(self, within_s: float = 180.0) -> LunaWebProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "luna", "web", "--no-embedded"],
            cwd=self.folder,
            env=self.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + within_s
        while not self.url:
            if self.proc.poll() is not None:
                raise AssertionError("luna web exited:\n" + "".join(self.stderr))
            if time.monotonic() > deadline:
                self.stop()
                raise AssertionError("luna web did not start:\n" + "".join(self.stderr))
            time.sleep(0.05)
        return self

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)
            if m := URL_RE.search(line):
                self.url = m.group(1)

    def stop(self) -> int:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError("luna web did not stop on SIGTERM") from None
