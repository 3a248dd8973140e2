"""Fewer fsyncs, same promise: what a turn acknowledged survives ``kill -9``, even mid tool round.

A turn fsyncs the log at its two ends (the user's message before anything else, the final reply
right after it); the rows in between are committed without an fsync, which ``kill -9`` cannot
undo (WAL mode), and made power-safe by the closing sync.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from luna.config import MemoryConfig
from luna.memory import Memory
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.luna_process import REPO, data_env


async def test_turn_syncs_at_its_two_ends_not_per_write(
    memory_config: Callable[..., MemoryConfig],
) -> None:
    # No background indexer: its vector writes are derived (durable=False, recomputed if
    # lost) and could land after the closing sync, which this test would read as the turn's.
    memory = Memory(memory_config())
    await memory.open(background=False)
    try:
        await _turn_syncs_at_its_two_ends(memory)
    finally:
        await memory.close()


async def _turn_syncs_at_its_two_ends(memory: Memory) -> None:
    store = memory.store
    mid = await memory.append_message("s", {"role": "user", "content": "list my files"})
    assert not store.has_unsynced  # the user's message: fsynced before it returned
    await memory.set_context(mid, "[time] Monday")
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
    await memory.append_message("s", {"role": "assistant", "content": "", "tool_calls": [call]})
    await memory.append_message("s", {"role": "tool", "tool_call_id": "c1", "content": "a.txt"})
    assert store.has_unsynced  # context, call and result: committed, not yet fsynced
    await memory.append_message("s", {"role": "assistant", "content": "There is a.txt."})
    assert memory._syncing is not None  # the closing sync, in the background
    await memory._syncing
    assert not store.has_unsynced
    _, records = await memory.prompt_history("s")
    assert [r.role for r in records] == ["user", "assistant", "tool", "assistant"]


def _session(tmp_path: Path) -> str:
    return (tmp_path / "data" / "repl_session").read_text().strip()


def _kill_during_third_request(tmp_path: Path, llm_server: FakeLLMServer) -> list[dict]:
    """Run a turn of two tool rounds; SIGKILL Luna while its third request waits for an
    answer. Returns the messages of that request."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "luna", "repl"],
        cwd=tmp_path,
        env=data_env(tmp_path, llm_server.url),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write("what is in my workspace?\n")
        proc.stdin.flush()
        # The third request carries both rounds: every call and result was acknowledged to the
        # model (it was sent), so each must be in the log. Kill while that request waits.
        llm_server.wait_for_requests(3, timeout=120.0)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    return [m for m in llm_server.requests[2]["messages"] if m["role"] != "system"]


async def test_kill_9_during_tool_rounds_keeps_every_acknowledged_message(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "notes.txt").write_text("tulips on Tuesday\n")
    llm_server.script(
        Reply(tool_calls=[{"name": "list_directory", "arguments": "{}", "id": "call_a"}]),
        Reply(
            content="Let me look closer.",
            tool_calls=[
                {"name": "read_file", "arguments": '{"path": "notes.txt"}', "id": "call_b"}
            ],
        ),
        Reply(content="never delivered", delay=120),
    )
    sent = await asyncio.to_thread(_kill_during_third_request, tmp_path, llm_server)

    mem = Memory(MemoryConfig(db_path=tmp_path / "data" / "luna.db"))
    await mem.open(background=False)
    try:
        _, records = await mem.prompt_history(_session(tmp_path))
    finally:
        await mem.close()
    assert [r.role for r in records] == ["user", "assistant", "tool", "assistant", "tool"]
    assert records[0].content == "what is in my workspace?"
    assert records[0].context, "the turn's context was committed before the request"
    assert [c["id"] for c in records[1].tool_calls or []] == ["call_a"]
    assert records[3].content == "Let me look closer."
    assert [r.tool_call_id for r in records if r.role == "tool"] == ["call_a", "call_b"]
    assert "tulips on Tuesday" in records[4].content
    # What the model was sent is what the log holds, message for message.
    assert [m["role"] for m in sent] == [r.role for r in records]
    for message, record in zip(sent[1:], records[1:], strict=True):
        assert json.dumps(message.get("content")).strip('"') in json.dumps(record.content)


WRITER = """
import asyncio, sys
from pathlib import Path
from luna.config import MemoryConfig
from luna.memory import Memory

async def main():
    mem = Memory(MemoryConfig(db_path=Path(sys.argv[1])))
    await mem.open(background=False)
    i = 0
    while True:
        call = {"id": f"c{i}", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
        await mem.append_message("s", {"role": "assistant", "content": "", "tool_calls": [call]})
        mid = await mem.append_message("s", {"role": "tool", "tool_call_id": f"c{i}",
                                             "content": f"result {i}"})
        print(mid, flush=True)
        i += 1

asyncio.run(main())
"""


async def test_unsynced_tool_rows_survive_kill_9(tmp_path: Path) -> None:
    path = tmp_path / "rounds.db"

    def write_until_killed() -> list[int]:
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        assert proc.stdout is not None
        acked = []
        while len(acked) < 40:
            line = proc.stdout.readline()
            assert line, proc.stderr.read() if proc.stderr else "writer died"
            acked.append(int(line))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        return acked

    acked = await asyncio.to_thread(write_until_killed)
    mem = Memory(MemoryConfig(db_path=path))
    await mem.open(background=False)
    try:
        _, records = await mem.prompt_history("s")
    finally:
        await mem.close()
    stored = {r.id for r in records}
    assert set(acked) <= stored
    results = [r.content for r in records if r.role == "tool"]
    assert results[: len(acked)] == [f"result {i}" for i in range(len(acked))]
