"""End to end: the REPL with no endpoint configured starts the real embedded demo model.

This runs the real llama.cpp server (llama-cpp-python) with Gemma 3 270M: no stand-ins.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

from tests.luna_process import REPO, clean_env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_repl_without_endpoint_starts_embedded_model_and_answers(tmp_path: Path) -> None:
    assert not port_open(8001), (
        "something listens on localhost:8001 (a real llama-server?); this test needs the "
        "default endpoint to be down so Luna falls back to the embedded model"
    )
    port = free_port()
    (tmp_path / "config.toml").write_text(
        f"[llm]\nembedded_port = {port}\nmax_tokens = 16\n[observe]\nconsole = false\n"
    )
    (tmp_path / "mcp_servers.json").write_text('{"servers": {}}')
    env = clean_env()
    proc = subprocess.run(
        [sys.executable, "-m", "luna"],
        cwd=tmp_path,
        env=env,
        input="Complete the list: one, two, three,\n",
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "embedded demo model" in proc.stdout
    assert "LLM_ENDPOINT" in proc.stdout  # says how to point Luna at a real server
    reply = proc.stdout.split("LLM_ENDPOINT=http://HOST:PORT/v1", 1)[1].splitlines()[1:]
    assert "".join(reply).strip(), proc.stdout  # the model said something
    assert "error:" not in proc.stdout
    assert not port_open(port), "the embedded server outlived Luna"
    # The explicit endpoint is never replaced: with LLM_ENDPOINT set and down, no fallback.
    env["LLM_ENDPOINT"] = f"http://127.0.0.1:{free_port()}/v1"
    down = subprocess.run(
        [sys.executable, "-m", "luna"],
        cwd=tmp_path,
        env=env,
        input="hello\n",
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert down.returncode == 0
    assert "embedded demo model" not in down.stdout
    assert "error: " in down.stdout and env["LLM_ENDPOINT"].split("/v1")[0] in down.stdout


PARENT_SCRIPT = """
import asyncio, pathlib, sys
from luna.config import build_config
from luna.llm.embedded import EmbeddedModel

async def main():
    cfg = build_config({"memory": {"db_path": sys.argv[1]}}, {}, base_dir=pathlib.Path("."))
    model = EmbeddedModel(cfg, port=0)
    await model.start()
    print(model.pid, model.port, flush=True)
    await asyncio.sleep(300)

asyncio.run(main())
"""


def test_embedded_server_dies_with_a_killed_parent(tmp_path: Path) -> None:
    models = tmp_path / "data"
    models.mkdir()
    script = tmp_path / "parent.py"
    script.write_text(PARENT_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen(
        [sys.executable, str(script), str(models / "luna.db")],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
    )
    assert parent.stdout is not None
    pid, port = map(int, parent.stdout.readline().split())
    assert Path(f"/proc/{pid}").exists()
    parent.kill()  # SIGKILL: no cleanup code runs in the parent
    parent.wait(timeout=10)
    for _ in range(200):
        if not Path(f"/proc/{pid}").exists():
            break
        time.sleep(0.05)
    assert not Path(f"/proc/{pid}").exists(), "the embedded server outlived a killed Luna"
    shutil.rmtree(models / "models", ignore_errors=True)
