"""The embedding child process: same vectors as in-process, and a dead worker is survivable."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from luna.errors import MemoryStoreError
from luna.memory.embed_worker import EmbeddingProcess
from luna.memory.embeddings import Embedder
from tests.luna_process import REPO


async def test_embed_worker_matches_in_process_vectors_and_survives_a_crash() -> None:
    worker = EmbeddingProcess("all-MiniLM-L6-v2", 384)  # private: killing it affects no one
    try:
        texts = ["we moved to Lisbon", "the tulip bulbs arrive on Friday"]
        remote = await worker.encode(texts)
        local = Embedder.shared("all-MiniLM-L6-v2", 384).encode(texts)
        assert remote.shape == (2, 384) and remote.dtype == np.float32
        assert np.allclose(np.linalg.norm(remote, axis=1), 1.0, atol=1e-5)
        assert np.allclose(remote, local, atol=1e-4)
        pool = worker._executor()
        (pid,) = list(pool._processes)  # noqa: SLF001 - the worker's pid, to kill it
        assert os.getpriority(os.PRIO_PROCESS, pid) >= os.getpriority(os.PRIO_PROCESS, 0) + 5
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(MemoryStoreError, match="embedding worker process died"):
            await worker.encode(["after the crash"])
        again = await worker.encode(["a fresh worker takes over"])
        assert again.shape == (1, 384)
    finally:
        worker.shutdown()


WORKER_SCRIPT = """
import asyncio, sys
from luna.memory.embed_worker import EmbeddingProcess

async def main():
    worker = EmbeddingProcess("all-MiniLM-L6-v2", 384)
    await worker.encode(["hello"])
    print(*worker._executor()._processes, flush=True)
    await asyncio.sleep(120)

if __name__ == "__main__":
    asyncio.run(main())
"""


def test_embed_worker_dies_with_a_killed_parent(tmp_path: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(WORKER_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen(
        [sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env
    )
    assert parent.stdout is not None
    worker_pid = int(parent.stdout.readline().split()[0])
    assert Path(f"/proc/{worker_pid}").exists()
    parent.kill()
    parent.wait(timeout=10)
    for _ in range(100):
        if not Path(f"/proc/{worker_pid}").exists():
            break
        time.sleep(0.05)
    assert not Path(f"/proc/{worker_pid}").exists(), "embedding worker outlived its parent"
