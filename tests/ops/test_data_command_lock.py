"""Data commands one at a time, through real ``python -m luna`` processes: concurrent
``luna restore`` runs never lose the live database (every database that was live is kept
aside, under its own name); a data command is refused in one line while another holds the
folder; the temp copies of a ``backup`` or ``db recover`` killed with ``kill -9`` are removed,
and said, by the next one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from luna.memory.storage.maintenance import MaintenanceLock
from tests.fakes.llm_server import FakeLLMServer
from tests.ops.data_files import make_db, memory_texts
from tests.ops.running_luna import luna_env, run_luna

NO_LLM = "http://127.0.0.1:9/v1"


def start(tmp_path: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "luna", *args],
        cwd=tmp_path,
        env=luna_env(tmp_path, NO_LLM),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def test_concurrent_restores_keep_every_live_database(tmp_path: Path) -> None:
    db = make_db(tmp_path / "data" / "luna.db", ["the live database before any restore"])
    backup = make_db(tmp_path / "b.db", ["the backup"])
    rounds, succeeded = 4, 0
    for _ in range(rounds):
        pair = [start(tmp_path, "restore", str(backup)) for _ in range(2)]
        for proc in pair:
            out, err = proc.communicate(timeout=120)
            assert "Traceback" not in err, err
            if proc.returncode == 0:
                succeeded += 1
            else:
                assert len(err.strip().splitlines()) == 1, err
                assert "another data command" in err or "Luna is running" in err, err
    assert memory_texts(db) == {"the backup"}
    aside = sorted(p for p in db.parent.glob("luna.db.before-restore-*") if "-wal" not in p.name
                   and "-shm" not in p.name)  # fmt: skip
    assert len(aside) == succeeded >= rounds  # one aside file for every restore that swapped
    kept = [memory_texts(p) for p in aside]
    assert {"the live database before any restore"} in kept  # the first live one is not lost


def test_a_data_command_is_refused_while_another_holds_the_folder(tmp_path: Path) -> None:
    make_db(tmp_path / "data" / "luna.db", ["a note"])
    lock = MaintenanceLock(tmp_path / "data")
    lock.acquire("restore")
    try:
        for args in (("backup",), ("restore", str(tmp_path / "data" / "luna.db")),
                     ("db", "recover", "-o", str(tmp_path / "r.db"))):  # fmt: skip
            done = run_luna(tmp_path, NO_LLM, *args)
            assert done.returncode == 1, (args, done.stdout, done.stderr)
            assert done.stderr.count("\n") == 1, done.stderr
            assert f"another data command (pid {os.getpid()}, luna restore)" in done.stderr
    finally:
        lock.release()
    assert run_luna(tmp_path, NO_LLM, "backup").returncode == 0


def kill_when(proc: subprocess.Popen[str], appeared: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 120
    while not appeared():
        assert proc.poll() is None, f"{what}: finished before it could be killed"
        assert time.monotonic() < deadline, what
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)


def test_kill9_during_backup_and_recover_leaves_nothing_the_next_run_keeps(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    make_db(data / "luna.db", ["a note"], filler_mb=150)
    backups = data / "backups"

    proc = start(tmp_path, "backup")
    kill_when(proc, lambda: any(backups.glob(".tmp-*")), "a backup's temp copy")
    proc = start(tmp_path, "db", "recover", "-o", str(tmp_path / "elsewhere" / "r.db"))
    kill_when(proc, lambda: any(data.glob(".recover-*")) or any(
        (tmp_path / "elsewhere").glob(".recover-*")), "recover's scratch copy")  # fmt: skip
    left = [*backups.glob(".tmp-*"), *data.glob(".recover-*"),
            *(tmp_path / "elsewhere").glob(".*")]  # fmt: skip
    assert left  # what the kills left behind

    again = run_luna(tmp_path, NO_LLM, "backup")
    assert again.returncode == 0, again.stderr
    assert again.stderr.startswith("note: removed ") and "that was killed" in again.stderr
    assert again.stderr.count("\n") == 1, again.stderr  # one line, the paths go to the log
    assert not [*backups.glob(".tmp-*"), *data.glob(".recover-*"), *data.glob(".tmp-*"),
                *(tmp_path / "elsewhere").glob(".*")]  # fmt: skip


def test_luna_start_removes_what_a_killed_backup_left(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    data = tmp_path / "data"
    make_db(data / "luna.db", ["a note"])
    (data / "backups").mkdir()
    left = [data / "backups" / ".tmp-luna-20260101-000000Z.db", data / ".tmp-restore-luna.db"]
    for path in left:
        path.write_bytes(b"x" * 1000)
    (data / ".recover-123-abcd").mkdir()
    (data / ".recover-123-abcd" / "damaged.db").write_bytes(b"x" * 1000)
    done = run_luna(tmp_path, llm_server.url, "repl", "--no-embedded", input="/quit\n")
    assert done.returncode == 0, done.stderr
    assert "note: removed 3 temp copy(ies) left by a backup, restore or recover" in done.stderr
    assert not [p for p in [*left, data / ".recover-123-abcd"] if p.exists()]
