"""A damaged or lost database, through real ``python -m luna`` processes: a corrupt page in the
middle or a file that is not a database is one line at start (what to do next, never a
traceback) and ✗ in doctor; damage found mid-run stops the writing and keeps the message; a
database emptied or deleted while the data folder shows it existed is refused loudly, and
``--fresh-database`` starts over only when asked."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.ops.damage import checkpoint, garble, middle_leaves, table_pages
from tests.ops.running_luna import RunningLuna, run_luna


def make_history(tmp_path: Path, endpoint: str, lines: int = 60) -> Path:
    """A real database written by the real REPL: ``lines`` turns in a few sessions."""
    typed = []
    for i in range(lines):
        if i and i % 20 == 0:
            typed.append("/new")
        typed.append(f"note {i}: the {['garden', 'boat', 'kitchen'][i % 3]} needs work {i}")
    done = run_luna(tmp_path, endpoint, "repl", "--no-embedded", input="\n".join(typed) + "\n")
    assert done.returncode == 0, done.stderr
    db = tmp_path / "data" / "luna.db"
    checkpoint(db)
    return db


def one_line(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    return lines[0]


def test_damaged_database_is_one_line_at_start_and_a_cross_in_doctor(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    db = make_history(tmp_path, llm_server.url)
    sent = len(llm_server.requests)
    garble(db, [p for p, _ in middle_leaves(db, "messages", 2)])

    start = run_luna(tmp_path, llm_server.url, "repl", "--no-embedded", input="hello\n")
    assert start.returncode == 1
    line = one_line(start.stderr)
    assert line.startswith(f"luna: the database {db} is damaged (")
    assert "Luna will not write to it" in line
    assert "`luna db recover`" in line and "`luna restore FILE`" in line
    assert len(llm_server.requests) == sent  # nothing was answered on the damaged file

    doctor = run_luna(tmp_path, llm_server.url, "doctor", "--only", "database")
    assert doctor.returncode == 1 and "Traceback" not in doctor.stderr
    assert f"✗ database: {db} fails PRAGMA quick_check" in doctor.stdout, doctor.stdout
    assert "fix: stop Luna, salvage what is readable into a new file with `luna db recover`" in (
        doctor.stdout
    )

    # A file that is not a database at all (its first page overwritten): one line too.
    garble(db, [1])
    start = run_luna(tmp_path, llm_server.url, "repl", "--no-embedded", input="hello\n")
    assert start.returncode == 1
    assert one_line(start.stderr).startswith(f"luna: the database {db} is not a SQLite database;")
    doctor = run_luna(tmp_path, llm_server.url, "doctor", "--only", "database")
    assert doctor.returncode == 1
    assert f"✗ database: {db} not a SQLite database; Luna will not write to it" in doctor.stdout


def test_damage_found_mid_run_stops_writing_and_keeps_the_message(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    db = make_history(tmp_path, llm_server.url, lines=50)
    held = tmp_path / "data" / "held_messages.jsonl"
    luna = RunningLuna(tmp_path, llm_server.url)
    try:
        luna.ready()
        checkpoint(db)
        garble(db, [p for p, _ in middle_leaves(db, "messages", 3)])
        garble(db, [p for p, t, _ in table_pages(db, "messages") if t == "internal"])
        other = sqlite3.connect(db, timeout=30)  # another writer: Luna's page cache is dropped
        other.execute("INSERT INTO meta (key, value) VALUES ('poke', '1')")
        other.close()

        llm_server.script(Reply(content="should never be needed"))
        luna.say("typed after the disk went bad")
        luna.wait(lambda: "error:" in luna.out, "the line about the damage")
        first = next(x for x in luna.out.splitlines() if x.startswith("error:"))
        assert f"the database {db} is damaged (" in first, first
        assert "`luna db recover`" in first

        luna.say("and one more after that")
        luna.wait(lambda: luna.out.count("error:") == 2, "the second line")
        second = [x for x in luna.out.splitlines() if x.startswith("error:")][1]
        assert "Luna will not write to it" in second and f"the message is kept ({held})" in second
        assert "Traceback" not in luna.err and "Internal error" not in luna.out, luna.err
        assert luna.quit() == 1  # piped, and two turns failed: a script can tell
    finally:
        luna.kill9()
    asked = json.dumps(llm_server.requests)
    assert "typed after the disk went bad" not in asked  # nothing went out unlogged
    assert "should never be needed" not in luna.out
    kept = [json.loads(x)["message"]["content"] for x in held.read_text().splitlines()]
    assert "and one more after that" in kept


def test_emptied_or_deleted_database_is_refused_loudly_until_asked_to_start_fresh(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    db = make_history(tmp_path, llm_server.url, lines=6)
    db.write_bytes(b"")  # truncated to 0 bytes
    for args in (("repl", "--no-embedded"), ("memory", "list")):
        refused = run_luna(tmp_path, llm_server.url, *args, input="hello\n")
        assert refused.returncode == 1
        line = one_line(refused.stderr)
        prefix = "luna" if args[0] == "repl" else "luna memory list"  # who says it
        assert line.startswith(f"{prefix}: the database {db} is empty (0 bytes), but the data")
        assert "a saved REPL session (repl_session)" in line
        assert "`luna --fresh-database`" in line
    doctor = run_luna(tmp_path, llm_server.url, "doctor", "--only", "database")
    assert doctor.returncode == 1
    assert f"✗ database: {db} is empty (0 bytes), but the data folder shows one existed" in (
        doctor.stdout
    )

    db.unlink()  # deleted, with a backup beside it: the line names the backup to restore
    (tmp_path / "data" / "backups").mkdir(exist_ok=True)
    stale = tmp_path / "data" / "backups" / "luna-20260101-000000Z.db"
    stale.write_bytes(b"not a real backup")  # only its name matters to the message
    refused = run_luna(tmp_path, llm_server.url, "repl", "--no-embedded", input="hello\n")
    assert refused.returncode == 1
    line = one_line(refused.stderr)
    assert f"luna: the database {db} is missing" in line
    assert f"restore the newest backup with `luna restore {stale}`" in line
    assert not db.exists()  # nothing was created behind the user's back

    llm_server.script(Reply(content="A fresh start."))
    fresh = run_luna(
        tmp_path, llm_server.url, "repl", "--no-embedded", "--fresh-database", input="hi\n"
    )
    assert fresh.returncode == 0, fresh.stderr
    assert "A fresh start." in fresh.stdout
    again = run_luna(tmp_path, llm_server.url, "memory", "stats", "--json")
    assert again.returncode == 0 and json.loads(again.stdout)["messages"] == 2


def test_a_many_problem_report_is_one_line_at_start_details_in_the_log(tmp_path: Path) -> None:
    from tests.ops.data_files import make_db

    db = make_db(tmp_path / "data" / "luna.db", [f"memory {i} " * 20 for i in range(3000)])
    garble(db, [p for p, t, _ in table_pages(db, "memories") if t == "internal"])
    start = run_luna(tmp_path, "http://127.0.0.1:9/v1", "repl", "--no-embedded", input="hi\n")
    assert start.returncode == 1
    line = one_line(start.stderr)
    assert line.startswith(f"luna: the database {db} is damaged (Tree "), line
    assert "more in the log)" in line and "`luna db recover`" in line
    logged = "".join(p.read_text() for p in (tmp_path / "data" / "logs").glob("*.jsonl"))
    assert "never used" in logged  # the whole quick_check report is in the log
    doctor = run_luna(tmp_path, "http://127.0.0.1:9/v1", "doctor", "--only", "database")
    assert doctor.returncode == 1 and "never used" not in doctor.stdout, doctor.stdout


def test_recover_refuses_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    for name, content in (("random.bin", os.urandom(300_000)), ("notes.txt", b"hello\n")):
        source = tmp_path / name
        source.write_bytes(content)
        out = tmp_path / f"{name}.recovered.db"
        done = run_luna(tmp_path, "http://127.0.0.1:9/v1", "db", "recover", str(source),
                        "-o", str(out))  # fmt: skip
        assert done.returncode == 1, done.stdout
        assert one_line(done.stderr) == (
            f"luna db recover: {source} is not a SQLite database and holds nothing to "
            "salvage; give the damaged luna.db (or restore a backup: `luna restore FILE`)"
        )
        assert "salvaged" not in done.stdout and not out.exists()
