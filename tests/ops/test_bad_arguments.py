"""Odd input on the command line and from the model, through real ``python -m luna``
processes: ids beyond SQLite's integer range (CLI commands and the model's ``cancel_task``),
bytes that are not UTF-8 in a task's text, and a stdout closed early (``| head``) are each one
line or none, never a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.ops.running_luna import luna_env, run_luna

NO_LLM = "http://127.0.0.1:9/v1"
HUGE = "99999999999999999999"  # > 2**63 - 1


def test_ids_past_sqlites_range_are_one_line_usage_errors(tmp_path: Path) -> None:
    for args in (("schedule", "cancel", HUGE), ("schedule", "run-now", HUGE),
                 ("schedule", "runs", HUGE), ("memory", "forget", str(2**63)),
                 ("schedule", "runs", "-5")):  # fmt: skip
        done = run_luna(tmp_path, NO_LLM, *args)
        assert "Traceback" not in done.stderr, (args, done.stderr)
        assert done.returncode == 2, (args, done.stderr)
        assert "id is a whole number from 1 to 9223372036854775807" in done.stderr, done.stderr
    missing = run_luna(tmp_path, NO_LLM, "schedule", "cancel", "999")
    assert missing.returncode == 1
    assert missing.stderr.strip().endswith("there is no task #999 (see `luna schedule list`)")


def test_the_models_cancel_task_with_a_huge_id_is_a_tool_error(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.script(
        Reply(tool_calls=[{"name": "cancel_task", "arguments": {"task_id": 2**70}}]),
        Reply(content="it is gone"),
    )
    done = run_luna(tmp_path, llm_server.url, "repl", "--no-embedded", input="cancel #huge\n")
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode == 0 and "it is gone" in done.stdout, done.stderr
    tool = [m for m in llm_server.requests[1]["messages"] if m["role"] == "tool"]
    assert f"there is no task #{2**70}" in json.dumps(tool), tool


def test_task_text_that_is_not_utf8_is_stored_visibly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "luna", "schedule", "add", b"call \xff\xfe mum", "--after", "1h"],
        cwd=tmp_path, env=luna_env(tmp_path, NO_LLM), capture_output=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert "call \ufffd\ufffd mum" in done.stdout.decode()


def test_a_stdout_closed_early_ends_quietly(tmp_path: Path) -> None:
    for args in (("config", "show"), ("schedule", "list"), ("memory", "list")):
        read, write = os.pipe()
        os.close(read)  # the reader is gone before Luna writes: `luna config show | head -0`
        proc = subprocess.run(
            [sys.executable, "-m", "luna", *args], cwd=tmp_path, env=luna_env(tmp_path, NO_LLM),
            stdout=write, stderr=subprocess.PIPE, text=True, timeout=300,
        )  # fmt: skip
        os.close(write)
        assert proc.stderr == "", (args, proc.stderr)
        assert proc.returncode == 141, args  # 128 + SIGPIPE, as coreutils


def test_backup_to_a_missing_folder_and_a_bogus_scope_are_refused(tmp_path: Path) -> None:
    from tests.ops.data_files import make_db

    make_db(tmp_path / "data" / "luna.db", ["a note"])
    done = run_luna(tmp_path, NO_LLM, "backup", str(tmp_path / "nonexistent" / "dir" / "x.db"))
    assert done.returncode == 2, done.stdout
    assert done.stderr == f"luna backup: there is no folder {tmp_path}/nonexistent/dir; create " \
        "it first\n"  # fmt: skip
    assert not (tmp_path / "nonexistent").exists()
    assert run_luna(tmp_path, NO_LLM, "backup").returncode == 0  # backups/ itself is made
    for args in (("add", "x", "--scope", "bogus"), ("list", "--scope", "user:"),
                 ("search", "x", "--scope", "user:abc\n")):  # fmt: skip
        done = run_luna(tmp_path, NO_LLM, "memory", *args)
        assert done.returncode == 2, (args, done.stdout)
        assert "is not a scope; give owner or user:<discord id>" in done.stderr, done.stderr
