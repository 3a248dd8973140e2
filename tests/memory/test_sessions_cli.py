"""``luna sessions list / forget / sweep`` as real ``python -m luna`` processes on a real data
folder, alone and beside a running Luna (a REPL with the scripted model)."""

from __future__ import annotations

import asyncio
import json
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

from luna.attachments.store import AttachmentStore, attachments_dir
from luna.config import MemoryConfig
from luna.memory import Memory
from luna.messages import Attachment
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.ops.running_luna import RunningLuna, luna_env, run_luna

SECRET = "the alarm code of the shed is 4471"


async def _fill(data: Path) -> tuple[str, str]:
    """repl-1 (the secret, its own file, a shared file, a memory) and ch-2 (the shared file)."""
    files = AttachmentStore(attachments_dir(data))
    own, shared = files.write(b"own bytes"), files.write(b"shared bytes")
    memory = Memory(MemoryConfig(db_path=data / "luna.db"))
    await memory.open(background=False, use_vectors=False)
    try:
        mine = [
            Attachment("image", "image/png", n, 9, s).to_json()
            for n, s in (("a", own), ("b", shared))
        ]
        await memory.append_message(
            "repl-1", {"role": "user", "content": SECRET, "attachments": mine}
        )
        await memory.append_message("repl-1", {"role": "assistant", "content": "Noted."})
        saved = data / "tool_outputs" / "document-0123abcd.txt"  # a long document's text
        saved.parent.mkdir()
        saved.write_text("page after page")
        await memory.append_message(
            "repl-1", {"role": "user", "content": f"[notes.pdf: 40 KB of text, saved to {saved}]"}
        )
        await memory.add_memory("shed alarm code 4471", session_id="repl-1")
        theirs = [Attachment("image", "image/png", "b", 12, shared).to_json()]
        await memory.append_message(
            "ch-2", {"role": "user", "content": "hi", "attachments": theirs}
        )
        await memory.append_message("ch-2", {"role": "assistant", "content": "Hello."})
    finally:
        await memory.close()
    return own, shared


def _rows(data: Path, session: str) -> int:
    async def count() -> int:
        memory = Memory(MemoryConfig(db_path=data / "luna.db"))
        await memory.open(background=False, use_vectors=False)
        try:
            rows = memory.store.query(
                "SELECT (SELECT count(*) FROM messages WHERE session_id = :s) + "
                "(SELECT count(*) FROM memories WHERE session_id = :s)",
                {"s": session},
            )
            return int(rows[0][0])
        finally:
            await memory.close()

    return asyncio.run(count())


def test_sessions_cli_lists_asks_and_forgets_files_and_all(tmp_path: Path) -> None:
    data = tmp_path / "data"
    own, shared = asyncio.run(_fill(data))
    llm = "http://127.0.0.1:9/v1"

    listed = run_luna(tmp_path, llm, "sessions", "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].split()[:2] == ["ID", "FRONT-END"]
    ch, repl = (line.split() for line in lines[1:])  # the most recently active first
    # id, front-end, last activity (date and time), messages, files, first line
    assert ch[:2] + ch[4:] == ["ch-2", "discord", "2", "1", "hi"]
    assert repl[:2] + repl[4:7] == ["repl-1", "repl", "3", "2", "the"]

    # No terminal and no --yes: refused, nothing deleted.
    refused = run_luna(tmp_path, llm, "sessions", "forget", "repl-1")
    assert refused.returncode == 2 and "add --yes" in refused.stderr
    assert _rows(data, "repl-1") == 4

    done = run_luna(tmp_path, llm, "sessions", "forget", "repl-1", "--yes")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(
        "forgot session repl-1: 3 messages, 1 memory, 1 file removed, 1 saved output removed, "
        "1 file kept (still in use)"
    ), done.stdout
    assert _rows(data, "repl-1") == 0 and _rows(data, "ch-2") == 2
    files = AttachmentStore(attachments_dir(data))
    assert not files.has(own) and files.has(shared)
    assert list((data / "tool_outputs").iterdir()) == []
    found = run_luna(tmp_path, llm, "memory", "search", "shed alarm code")
    assert found.returncode == 0 and "4471" not in found.stdout

    again = run_luna(tmp_path, llm, "sessions", "forget", "repl-1", "--yes")
    assert again.returncode == 1 and "no session 'repl-1'" in again.stderr
    typo = run_luna(tmp_path, llm, "sessions", "forget", "repl-9")  # no terminal, no --yes
    assert typo.returncode == 1 and "no session 'repl-9'" in typo.stderr, typo.stderr
    after = run_luna(tmp_path, llm, "sessions", "list", "--json")
    assert [json.loads(line)["id"] for line in after.stdout.splitlines()] == ["ch-2"]

    # A file no message refers to goes with `sweep` once it is a day old.
    loose = files.write(b"left by a crash")
    swept = run_luna(tmp_path, llm, "sessions", "sweep")
    assert swept.returncode == 0 and "(1 newer than a day left)" in swept.stdout
    past = time.time() - 2 * 86_400
    os.utime(files.path(loose), (past, past))
    swept = run_luna(tmp_path, llm, "sessions", "sweep")
    assert swept.stdout.startswith("removed 1 file(s)") and not files.has(loose)
    assert files.has(shared)


def test_sessions_forget_beside_a_running_luna(tmp_path: Path, llm_server: FakeLLMServer) -> None:
    """Refused while the running REPL is in a turn of the session; once it has answered, the
    forget goes through and the REPL's next turn starts a fresh conversation."""
    llm_server.script(Reply(content="Got it.", delay=4.0))
    luna = RunningLuna(tmp_path, llm_server.url)
    try:
        luna.ready()
        session = re.search(r"session (\S+)", luna.out).group(1)
        luna.say(SECRET)
        luna.wait(lambda: bool(llm_server.requests), "the turn's request")
        busy = run_luna(tmp_path, llm_server.url, "sessions", "forget", session, "--yes")
        assert busy.returncode == 1 and "has a turn running" in busy.stderr, busy.stderr
        luna.wait(lambda: "Got it." in luna.out, "the reply")

        done = run_luna(tmp_path, llm_server.url, "sessions", "forget", session, "--yes")
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith(f"forgot session {session}: 2 messages")

        llm_server.script(Reply(content="Hello, fresh start."))
        luna.say("hello again")
        luna.wait(lambda: "Hello, fresh start." in luna.out, "the next reply")
        sent = llm_server.requests[-1]["messages"]
        assert [m["role"] for m in sent] == ["system", "user"] and "4471" not in str(sent)
        assert luna.quit() == 0
    finally:
        luna.kill9()
    assert "Traceback" not in luna.err


def _on_terminal(tmp_path: Path, answer: str, *args: str) -> tuple[int, str]:
    """``python -m luna ARGS`` with a pseudo-terminal for stdin, typing ``answer``."""
    primary, secondary = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "luna", *args],
        cwd=tmp_path,
        env=luna_env(tmp_path, "http://127.0.0.1:9/v1"),
        stdin=secondary,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(secondary)
    os.write(primary, answer.encode() + b"\n")
    out, err = proc.communicate(timeout=120)
    os.close(primary)
    assert "Traceback" not in err, err
    return proc.returncode, out


def test_sessions_forget_asks_on_a_terminal(tmp_path: Path) -> None:
    data = tmp_path / "data"
    asyncio.run(_fill(data))
    code, out = _on_terminal(tmp_path, "n", "sessions", "forget", "repl-1")
    assert code == 1 and out.endswith("kept\n"), out
    assert out.startswith("session repl-1: 3 messages, ") and "2 files, 1 memory learned" in out
    assert "Forget it? This cannot be undone. [y/N] " in out
    assert _rows(data, "repl-1") == 4
    code, out = _on_terminal(tmp_path, "y", "sessions", "forget", "repl-1")
    assert code == 0 and "forgot session repl-1: 3 messages" in out, out
    assert _rows(data, "repl-1") == 0
