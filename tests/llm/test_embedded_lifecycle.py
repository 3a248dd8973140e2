"""The embedded model's llama-server dies with Luna, even when Luna is killed with SIGKILL."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.luna_process import REPO

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
    # A loaded box can take seconds to finish the server's SIGTERM shutdown, and the orphan is
    # reaped by whoever adopted it: a zombie has exited.
    deadline = time.monotonic() + 30
    while _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _running(pid), "the embedded server outlived a killed Luna"
    shutil.rmtree(models / "models", ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
