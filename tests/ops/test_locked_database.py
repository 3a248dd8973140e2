"""Another program holds the database's write lock past ``memory.lock_wait``, through a real
``python -m luna`` REPL: the typed message ends in one clear line (never "Internal error", never
a traceback), it is kept, and it lands in the log in order once the lock frees — also when Luna
is killed meanwhile. Starting Luna while the lock is held is one line too."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.ops.running_luna import RunningLuna, run_luna, wait_for

LOCK_WAIT = 2.0


def write_config(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "config.toml").write_text(
        f"[memory]\nlock_wait = {LOCK_WAIT}\nlibrarian = false\n[llm]\nmax_retries = 0\n"
    )
    return {"LUNA_CONFIG": str(tmp_path / "config.toml")}


def hold_write_lock(db: Path) -> sqlite3.Connection:
    """Another program (the stdlib's SQLite here) takes the write lock and keeps it."""
    conn = sqlite3.connect(db, isolation_level=None, timeout=30)
    conn.execute("BEGIN IMMEDIATE")
    return conn


def rows(db: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(db, timeout=30)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_locked_database_keeps_the_message_and_writes_it_when_the_lock_frees(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    env = write_config(tmp_path)
    db = tmp_path / "data" / "luna.db"
    held = tmp_path / "data" / "held_messages.jsonl"
    llm_server.script(Reply(content="Noted the first."))
    luna = RunningLuna(tmp_path, llm_server.url, **env)
    try:
        luna.say("the first message, before any lock")
        luna.wait(lambda: "Noted the first." in luna.out, "the first reply")

        locker = hold_write_lock(db)
        started = time.monotonic()
        luna.say("typed while another program holds the lock")
        luna.wait(lambda: "error:" in luna.out, "the line about the lock")
        waited = time.monotonic() - started
        line = next(x for x in luna.out.splitlines() if x.startswith("error:"))
        assert "write lock" in line and f"for over {LOCK_WAIT:g} s" in line, line
        assert f"the message is kept ({held})" in line, line
        assert "Internal error" not in luna.out and "Traceback" not in luna.err, luna.err
        assert LOCK_WAIT <= waited < LOCK_WAIT + 5, waited  # bounded: lock_wait, a try more
        assert len(llm_server.requests) == 1  # nothing went to the model without its log
        luna.say("a second one, still locked")
        luna.wait(lambda: luna.out.count("error:") == 2, "the second line about the lock")
        kept = [json.loads(x) for x in held.read_text().splitlines()]
        assert [k["message"]["content"] for k in kept] == [
            "typed while another program holds the lock",
            "a second one, still locked",
        ]
        luna.kill9()  # the held messages are on disk: a crash loses none
    finally:
        luna.kill9()

    # Still locked: a new start waits lock_wait, then one line (no traceback).
    refused = run_luna(tmp_path, llm_server.url, "repl", "--no-embedded", input="hi\n")
    assert refused.returncode == 1 and "Traceback" not in refused.stderr, refused.stderr
    assert refused.stderr.strip().splitlines() == [
        f"luna: another program has held the database's write lock for over {LOCK_WAIT:g} s ({db})"
    ]
    locker.execute("COMMIT")
    locker.close()

    llm_server.script(Reply(content="Now I have all three."))
    again = RunningLuna(tmp_path, llm_server.url, **env)
    try:
        again.say("after the lock freed")
        again.wait(lambda: "Now I have all three." in again.out, "the reply after the lock")
        assert "Traceback" not in again.err, again.err
        wait_for(lambda: not held.exists(), "the held file removed")
    finally:
        assert again.quit() == 0
    logged = rows(db, "SELECT role, content FROM messages ORDER BY id")
    assert logged == [
        ("user", "the first message, before any lock"),
        ("assistant", "Noted the first."),
        ("user", "typed while another program holds the lock"),
        ("user", "a second one, still locked"),
        ("user", "after the lock freed"),
        ("assistant", "Now I have all three."),
    ]
    times = [r[0] for r in rows(db, "SELECT created_at FROM messages ORDER BY id")]
    assert times == sorted(times)  # held messages keep the time they were typed
    sent = [m["content"] for m in llm_server.requests[-1]["messages"] if m["role"] == "user"]
    assert "typed while another program holds the lock" in sent[-3]
    assert "a second one, still locked" in sent[-2]
