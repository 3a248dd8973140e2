"""``luna schedule list / add / cancel / run-now / runs`` as real subprocesses, with --json."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from tests.luna_process import clean_env


def luna(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "config.toml").write_text('[agent]\ntimezone = "America/New_York"\n')
    return subprocess.run(
        [sys.executable, "-m", "luna", "schedule", *args],
        cwd=tmp_path,
        env=clean_env(MEMORY_DB_PATH=str(tmp_path / "data" / "luna.db")),
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_schedule_add_list_run_now_cancel_with_json(tmp_path: Path) -> None:
    added = luna(tmp_path, "add", "Zahnarzt anrufen 🦷", "--at", "2030-01-02 09:00", "--json")
    assert added.returncode == 0, added.stderr
    task = json.loads(added.stdout)
    assert task["id"] == 1 and task["text"] == "Zahnarzt anrufen 🦷"
    assert task["next_run"] == "2030-01-02T14:00:00.000+00:00"  # stored in UTC
    assert task["next_run_local"] == "2030-01-02 09:00 EST"
    assert task["target"] == {"frontend": "repl"} and task["state"] == "active"
    prompt = luna(tmp_path, "add", "check the inbox", "--cron", "0 8 * * 1-5", "--prompt")
    assert prompt.returncode == 0, prompt.stderr
    assert prompt.stdout.startswith("scheduled #2 prompt [active] next ")

    listed = luna(tmp_path, "list", "--json")
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [r["id"] for r in rows] == [2, 1] and rows[0]["schedule"].startswith("cron 0 8")

    now = luna(tmp_path, "run-now", "1", "--json")
    assert now.returncode == 0, now.stderr
    assert json.loads(now.stdout)["next_run"] < task["next_run"]
    cancelled = luna(tmp_path, "cancel", "2", "--json")
    assert json.loads(cancelled.stdout)["state"] == "cancelled"
    assert [json.loads(x)["id"] for x in luna(tmp_path, "list", "--json").stdout.splitlines()] \
        == [1]  # fmt: skip
    everything = luna(tmp_path, "list", "--all")
    assert "#2 prompt [cancelled]" in everything.stdout
    assert luna(tmp_path, "runs", "1", "--json").stdout == ""


def test_cli_schedule_refusals_are_one_line_exit_1(tmp_path: Path) -> None:
    for args, message in (
        (("add", "x", "--cron", "* * * * * *"), "seconds are not supported"),
        (("add", "x", "--at", "1970-01-01 00:00"), "is in the past"),
        (("add", "x", "--every", "1s"), "shorter than 5m"),
        (("cancel", "42"), "there is no task #42"),
        (("add", "x", "--after", "1h", "--to", "discord"), "needs discord.owner_id"),
    ):
        proc = luna(tmp_path, *args)
        assert proc.returncode == 1, (args, proc.stderr)
        prefix = f"luna schedule {args[0]}: "  # every command names itself
        assert proc.stderr.startswith(prefix) and message in proc.stderr, proc.stderr
        assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


HOSTILE = "call \x1b]52;c;SGVsbG8=\x07 the \x9b31m dentist \u202eevil\x1b[2J"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def test_cli_schedule_output_neutralizes_escape_codes(tmp_path: Path) -> None:
    added = luna(tmp_path, "add", HOSTILE, "--after", "1h")
    assert added.returncode == 0, added.stderr
    conn = sqlite3.connect(tmp_path / "data" / "luna.db")
    conn.execute(
        "INSERT INTO task_runs (task_id, due_at, started_at, finished_at, attempt, status, "
        "output) VALUES (1, '2026-01-01T00:00:00.000+00:00', '2026-01-01T00:00:00.000+00:00', "
        "'2026-01-01T00:00:01.000+00:00', 0, 'ok', ?)",
        (HOSTILE,),
    )
    conn.commit()
    conn.close()
    shown = [added]
    commands = [("list",), ("list", "--json"), ("runs", "1"), ("runs", "1", "--json")]
    commands += [("run-now", "1"), ("run-now", "1", "--json"), ("cancel", "1", "--json")]
    for args in commands:
        done = luna(tmp_path, *args)
        assert done.returncode == 0, (args, done.stderr)
        shown.append(done)
    for done in shown:
        assert not [c for c in RAW if c in done.stdout], (done.args, done.stdout)
        assert "dentist" in done.stdout
    # (the scheduler drops C0 controls from a task's text when it stores it; C1 and bidi stay)
    assert "\\x9b31m" in shown[1].stdout and "\\u202e" in shown[1].stdout
    assert "\x9b31m" in json.loads(shown[2].stdout)["text"]  # the JSON keeps the value
    assert json.loads(shown[4].stdout)["output"] == HOSTILE


def test_cli_schedule_refuses_crons_closer_than_the_limit_at_a_clock_change(
    tmp_path: Path,
) -> None:
    # 01:59 and 03:01 are 62 minutes apart on any day but the spring-forward one (2 minutes).
    for expr, message in (
        ("1,59 1,3 * * *", "fires every 2m; the shortest allowed is 5m"),
        ("58 1 * * *", None),  # once a day: fine
        ("0 0 31 2 *", "never fires: none of its months has day 31"),
        ("0 0 32 * *", "bad day-of-month field"),
    ):
        done = luna(tmp_path, "add", "x", "--cron", expr)
        if message is None:
            assert done.returncode == 0, done.stderr
            continue
        assert done.returncode == 1, (expr, done.stdout)
        assert message in done.stderr and done.stderr.count("\n") == 1, done.stderr
