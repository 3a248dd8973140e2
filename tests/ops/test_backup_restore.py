"""The way back, through real ``python -m luna`` processes on a real database: ``luna backup``
while Luna writes, pages garbled in the middle of the file, ``luna db recover`` (how many
messages came back, and exactly the intact ones), ``luna restore`` (refused while Luna runs; the
damaged file kept aside; the newest backup loses nothing older than it), and the daily backups
(made at start when due, N kept, never a bad copy)."""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import time
from pathlib import Path

from tests.fakes.llm_server import FakeLLMServer
from tests.ops.damage import checkpoint, garble, middle_leaves, table_pages
from tests.ops.running_luna import RunningLuna, run_luna, wait_for

TOPICS = ["garden", "boat", "kitchen", "bicycle", "violin"]


def messages(db: Path) -> dict[int, tuple[str, str, str]]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute("SELECT id, session_id, role, content FROM messages").fetchall()
    finally:
        conn.close()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def typed_lines(count: int) -> list[str]:
    lines = []
    for i in range(count):
        if i and i % 20 == 0:
            lines.append("/new")  # sessions stay well inside the fake server's context
        if i % 25 == 7:
            lines.append(f"/remember fact {i}: the {TOPICS[i % 5]} key is blue")
        lines.append(f"line {i}: about the {TOPICS[i % 5]}, item {i * 7919 % 1000}")
    return lines


def test_backup_while_writing_then_salvage_and_restore(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    db = tmp_path / "data" / "luna.db"
    lines = typed_lines(200)
    luna = RunningLuna(tmp_path, llm_server.url)
    try:
        luna.ready()
        for line in lines:
            luna.say(line)
        luna.wait(lambda: luna.out.count("ok\n") >= 60, "sixty replies", timeout=180)
        made = run_luna(tmp_path, llm_server.url, "backup")  # while the REPL keeps writing
        replies_after = luna.out.count("ok\n")
        assert made.returncode == 0, made.stderr
        match = re.fullmatch(
            rf"backed up {re.escape(str(db))} to (\S+): [0-9.]+ [KM]B, (\d+) messages, "
            r"(\d+) memories \([0-9.]+ s\)\n",
            made.stdout,
        )
        assert match, made.stdout
        mid_backup, mid_count = Path(match.group(1)), int(match.group(2))
        assert mid_backup.parent == tmp_path / "data" / "backups"
        luna.wait(lambda: luna.out.count("ok\n") >= 200, "every reply", timeout=300)
        assert luna.quit() == 0
    finally:
        luna.kill9()
    assert replies_after < 200  # the backup really ran while the REPL was writing
    pristine = messages(db)
    assert len(pristine) == 400
    # A consistent snapshot of an append-only log is a prefix of it, each row as it is now.
    snapshot = messages(mid_backup)
    assert len(snapshot) == mid_count and 120 <= mid_count < 400
    assert sorted(snapshot) == list(range(1, mid_count + 1))
    assert all(pristine[i] == row for i, row in snapshot.items())

    # restore refuses while a Luna runs on the folder (this start also makes the daily backup).
    running = RunningLuna(tmp_path, llm_server.url)
    try:
        running.ready()
        before = hashlib.sha256(db.read_bytes()).hexdigest()
        refused = run_luna(tmp_path, llm_server.url, "restore", str(mid_backup))
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert refused.stderr.strip() == (
            f"luna restore: Luna is running on this data folder (pid {running.proc.pid}); stop "
            "it first: the database cannot be swapped under a running Luna"
        )
        assert hashlib.sha256(db.read_bytes()).hexdigest() == before
        assert running.quit() == 0
    finally:
        running.kill9()

    # The disk loses three leaf pages in the middle of the messages and its interior page.
    checkpoint(db)
    lost_leaves = middle_leaves(db, "messages", 3)
    interior = [p for p, t, _ in table_pages(db, "messages") if t == "internal"]
    assert interior
    garble(db, [p for p, _ in lost_leaves] + interior)
    damaged = db.read_bytes()
    expected_lost = sum(n for _, n in lost_leaves)

    out = tmp_path / "salvaged.db"
    salvage = run_luna(tmp_path, llm_server.url, "db", "recover", "--output", str(out))
    assert salvage.returncode == 0, salvage.stderr
    assert "Traceback" not in salvage.stderr
    recovered = messages(out)
    assert len(recovered) == 400 - expected_lost
    assert f"messages         {400 - expected_lost} of 400, {expected_lost} lost" in (
        salvage.stdout
    ), salvage.stdout
    assert all(pristine[i] == row for i, row in recovered.items())  # exactly as written
    gone = sorted(set(pristine) - set(recovered))
    assert len(gone) == expected_lost
    assert "memories         8 of 8" in salvage.stdout, salvage.stdout

    put_back = run_luna(tmp_path, llm_server.url, "restore", str(out))
    assert put_back.returncode == 0, put_back.stderr
    aside = re.search(r"the previous database is kept as (\S+)", put_back.stdout)
    assert aside and Path(aside.group(1)).read_bytes() == damaged  # kept, not deleted
    found = run_luna(tmp_path, llm_server.url, "memory", "search", "violin item", "--json")
    assert found.returncode == 0, found.stderr
    assert "violin" in found.stdout  # the rebuilt index answers
    chat = run_luna(tmp_path, llm_server.url, "repl", "--no-embedded", input="hello again\n")
    assert chat.returncode == 0 and "ok" in chat.stdout, chat.stderr

    # The newest backup (made at the last start, after every write) loses nothing older.
    backups = sorted((tmp_path / "data" / "backups").glob("*.db"), key=lambda p: p.stat().st_mtime)
    newest = backups[-1]
    assert newest.name.startswith("luna-auto-")
    restored = run_luna(tmp_path, llm_server.url, "restore", str(newest))
    assert restored.returncode == 0, restored.stderr
    assert messages(db) == pristine


def test_daily_backups_at_start_keep_n_and_never_keep_a_bad_copy(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    (tmp_path / "config.toml").write_text("[memory]\nbackups_keep = 2\n")
    env = {"LUNA_CONFIG": str(tmp_path / "config.toml")}
    folder = tmp_path / "data" / "backups"
    db = tmp_path / "data" / "luna.db"

    def start_and_quit() -> None:
        luna = RunningLuna(tmp_path, llm_server.url, **env)
        try:
            luna.say("a line for the log")
            luna.wait(lambda: "ok" in luna.out, "the reply")
            assert luna.quit() == 0
        finally:
            luna.kill9()

    start_and_quit()  # the database had nothing at start: no backup of an empty log
    assert not folder.exists() or not list(folder.glob("luna-auto-*.db"))
    for day, age in (("20200101", 3), ("20200102", 2)):
        old = folder / f"luna-auto-{day}-000000Z.db"
        made = run_luna(tmp_path, llm_server.url, "backup", str(old))
        assert made.returncode == 0, made.stderr
        stamp = time.time() - age * 86_400
        os.utime(old, (stamp, stamp))

    start_and_quit()  # the newest daily backup is two days old: one is made at start
    wait_for(lambda: len(list(folder.glob("luna-auto-*.db"))) == 2, "rotation to 2")
    autos = sorted(p.name for p in folder.glob("luna-auto-*.db"))
    assert autos[0] == "luna-auto-20200102-000000Z.db"  # the oldest beyond keep went
    fresh = folder / autos[1]
    conn = sqlite3.connect(f"file:{fresh}?mode=ro", uri=True)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert conn.execute("PRAGMA journal_mode").fetchone() == ("delete",)  # one whole file
    conn.close()
    taken = messages(fresh)  # a snapshot at start: the first run's turn, maybe this one's too
    assert 2 <= len(taken) <= 4 and sorted(taken) == list(range(1, len(taken) + 1))
    assert not list(folder.glob(".tmp-*"))

    start_and_quit()  # the newest is minutes old: no other
    assert sorted(p.name for p in folder.glob("luna-auto-*.db")) == autos

    # A damaged source never becomes a backup, and the good ones stay as they were.
    checkpoint(db)
    leaves = [p for p, t, _ in table_pages(db, "messages") if t == "leaf"]
    garble(db, leaves[:1] + [p for p, t, _ in table_pages(db, "docs_fts_content")][:1])
    digests = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()}
    bad = run_luna(tmp_path, llm_server.url, "backup")
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    (line,) = bad.stderr.strip().splitlines()
    assert line.startswith(f"luna backup: the database {db} is damaged"), line
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir()} == (
        digests
    )

    too_many = run_luna(tmp_path, llm_server.url, "config", "set", "memory.backups_keep", "5000")
    assert too_many.returncode == 2 and "memory.backups_keep" in too_many.stderr
