"""The embedding child process: same vectors as in-process, queries at normal priority and bulk
work below it, and a dead worker is survivable."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from luna.errors import MemoryStoreError
from luna.memory.embedding.embed_worker import EmbeddingProcess, WorkerDiedError
from luna.memory.embedding.embeddings import Embedder
from tests.luna_process import REPO


def _thread_nices(pid: int) -> dict[int, int]:
    """{thread id: nice value} of every thread of ``pid`` (field 19 of /proc/.../stat)."""
    tasks = Path(f"/proc/{pid}/task").iterdir()
    return {int(t.name): int((t / "stat").read_text().rsplit(")", 1)[1].split()[16]) for t in tasks}


async def test_embed_worker_matches_in_process_vectors_and_survives_a_crash(
    model_cache: Path,
) -> None:
    # private: killing it affects no one
    worker = EmbeddingProcess("all-MiniLM-L6-v2", 384, cache_dir=model_cache)
    try:
        texts = ["we moved to Lisbon", "the tulip bulbs arrive on Friday"]
        remote = await worker.encode(texts)
        local = Embedder("all-MiniLM-L6-v2", 384, cache_dir=model_cache).encode(texts)
        assert remote.shape == (2, 384) and remote.dtype == np.float32
        assert np.allclose(np.linalg.norm(remote, axis=1), 1.0, atol=1e-5)
        assert np.allclose(remote, local, atol=1e-4)
        pool = worker._executor()
        (pid,) = list(pool._processes)  # the worker's pid, to kill it
        await worker.encode(texts * 20)  # bulk: split over the low-priority threads
        ours = os.getpriority(os.PRIO_PROCESS, 0)
        nice = await asyncio.to_thread(_thread_nices, pid)
        assert nice.pop(pid) == ours  # the main thread, where queries run: normal priority
        assert sum(1 for n in nice.values() if n >= ours + 5) >= 2  # the bulk threads
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(MemoryStoreError, match="embedding worker process died"):
            await worker.encode(["after the crash"])
        again = await worker.encode(["a fresh worker takes over"])
        assert again.shape == (1, 384)
    finally:
        worker.shutdown()


async def test_embed_worker_queries_take_their_own_socket_and_survive_a_crash(
    model_cache: Path,
) -> None:
    """Once the model is loaded a query goes over the worker's query socket (not the pool):
    the same vectors, the answer to a cancelled query never reaches the next one, a second
    query while one is out takes the pool, and a killed worker is a WorkerDiedError, then a
    fresh worker with a socket of its own."""
    worker = EmbeddingProcess("all-MiniLM-L6-v2", 384, cache_dir=model_cache)
    try:
        await worker.load()
        local = Embedder("all-MiniLM-L6-v2", 384, cache_dir=model_cache)
        queries = worker._queries  # the socket under test
        assert queries is not None and queries.is_free
        sent = queries._number
        vec = await worker.encode(["where do the tulips go"], is_query=True)
        assert queries._number == sent + 1  # it went over the socket
        assert np.allclose(vec, local.encode(["where do the tulips go"], is_query=True), atol=1e-4)

        first = asyncio.create_task(worker.encode(["the first question"], is_query=True))
        await asyncio.sleep(0)  # the first is out over the socket
        assert not queries.is_free
        pooled = asyncio.create_task(worker.encode(["a second question"], is_query=True))
        await asyncio.sleep(0)  # it found the socket busy: the pool takes it
        # Cancelled a loop turn after it was sent: an encode takes the worker milliseconds,
        # so its answer is still to come (and must not reach the third caller).
        first.cancel()
        with pytest.raises(asyncio.CancelledError):
            await first
        second = await pooled
        assert queries._number == sent + 2  # only the first used the socket
        third = await worker.encode(["the third question"], is_query=True)
        assert queries._number == sent + 3  # over the socket again
        expected = local.encode(["a second question", "the third question"], is_query=True)
        assert np.allclose(second, expected[:1], atol=1e-4)
        assert np.allclose(third, expected[1:], atol=1e-4)  # not the cancelled first's

        (pid,) = list(worker._executor()._processes)  # to kill it
        os.kill(pid, signal.SIGKILL)
        with pytest.raises(WorkerDiedError, match="embedding worker process died"):
            await worker.encode(["after the crash"], is_query=True)
        await worker.load()
        assert worker._queries is not None and worker._queries is not queries
        again = await worker.encode(["a fresh worker takes over"], is_query=True)
        assert again.shape == (1, 384) and worker._queries._number == 1
    finally:
        worker.shutdown()


WORKER_SCRIPT = """
import asyncio, sys
from pathlib import Path
from luna.memory.embedding.embed_worker import EmbeddingProcess

async def main():
    worker = EmbeddingProcess("all-MiniLM-L6-v2", 384, cache_dir=Path(sys.argv[1]))
    await worker.encode(["hello"])
    print(*worker._executor()._processes, flush=True)
    await asyncio.sleep(120)

if __name__ == "__main__":
    asyncio.run(main())
"""


def test_embed_worker_dies_with_a_killed_parent(tmp_path: Path, model_cache: Path) -> None:
    script = tmp_path / "parent.py"
    script.write_text(WORKER_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    parent = subprocess.Popen(
        [sys.executable, str(script), str(model_cache)], stdout=subprocess.PIPE, text=True, env=env
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


DIES_WITH_PARENT = """
import os, sys, time
from luna.memory.embedding.embed_worker import die_with_parent
die_with_parent(int(sys.argv[1]))
print(os.getpid(), flush=True)
time.sleep(120)
"""

MIDDLE = """
import subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(__import__("os").getpid())],
                         stdout=subprocess.PIPE, text=True)
print(child.stdout.readline().strip(), flush=True)
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    """No such process, or only its zombie (dead, not yet reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def test_model_export_child_dies_the_moment_its_parent_does() -> None:
    """The export (``die_with_parent``) is killed by the kernel when its parent goes: even a
    child that cannot run (stopped, like one stuck in a long import) is gone at once, where a
    poll of the parent's pid would never notice. Luna's shutdown terminates the embedding
    process mid-export; the export used to outlive it (CI: an orphan after SIGTERM)."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    middle = subprocess.Popen(
        [sys.executable, "-c", MIDDLE, DIES_WITH_PARENT], stdout=subprocess.PIPE, text=True, env=env
    )
    assert middle.stdout is not None
    child = int(middle.stdout.readline())
    try:
        os.kill(child, signal.SIGSTOP)
        middle.kill()
        middle.wait(timeout=10)
        deadline = time.monotonic() + 10
        while not _gone(child) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(child), "the stopped child outlived its parent"
    finally:
        if not _gone(child):
            os.kill(child, signal.SIGKILL)


def test_run_export_tells_the_exporter_whom_to_die_with(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from luna.memory.embedding import model_cache

    seen: dict[str, object] = {}

    class FakeExport:  # the exporter's process: says it exported, exits 0
        def __init__(self, cmd: list[str], **kw: object) -> None:
            seen.update(cmd=cmd, env=kw.get("env"))
            self.stdout, self.stderr, self.returncode = iter(["exported\n"]), iter([]), 0

        def wait(self, timeout: float | None = None) -> int:
            return 0

    monkeypatch.setattr(model_cache.subprocess, "Popen", FakeExport)
    outcome = model_cache.run_export(tmp_path, "all-MiniLM-L6-v2", 384)
    assert outcome.ok and seen["cmd"][:3] == [
        sys.executable,
        "-m",
        "luna.memory.embedding.onnx_export",
    ]
    env = seen["env"]
    assert isinstance(env, dict) and env[model_cache.PARENT_ENV] == str(os.getpid())
