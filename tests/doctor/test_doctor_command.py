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
