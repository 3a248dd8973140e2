"""Attachments go with ``luna backup`` and come back with ``luna restore``: real ``python -m
luna`` processes, files sent through the REPL's ``/attach``."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from luna.attachments.store import AttachmentStore
from tests.fakes.attachments import pdf, photo
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.test_repl import start_repl
from tests.ops.running_luna import run_luna


def stored_hashes(db: Path) -> set[str]:
    with sqlite3.connect(db) as conn:
        return {r[0] for r in conn.execute("SELECT sha256 FROM message_attachments")}


def test_backup_copies_attachments_and_restore_brings_them_back(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    (tmp_path / "cat.jpg").write_bytes(photo(640, 480))
    (tmp_path / "bill.pdf").write_bytes(pdf(["Electricity 71.20 EUR"]))
    llm_server.script(Reply(content="Got them."))
    repl = start_repl(tmp_path, llm_server.url)
    out, err = repl.communicate("/attach cat.jpg\n/attach bill.pdf\nkeep these\n", timeout=180)
    assert repl.returncode == 0, err
    db = tmp_path / "data" / "luna.db"
    hashes = stored_hashes(db)
    assert len(hashes) == 2

    made = run_luna(tmp_path, llm_server.url, "backup")
    assert made.returncode == 0, made.stderr
    backups = tmp_path / "data" / "backups"
    assert f"attachments in {backups / 'attachments'}: 2 copied, 0 already there" in made.stdout
    beside = AttachmentStore(backups / "attachments")
    assert set(beside.hashes()) == hashes and all(beside.verify(h) is None for h in hashes)
    # A second backup in the same folder shares the files (its own name: one second apart, the
    # default names would be the same).
    again = run_luna(tmp_path, llm_server.url, "backup", str(backups / "second.db"))
    assert "0 copied, 2 already there" in again.stdout, again.stdout

    shutil.rmtree(tmp_path / "data" / "attachments")  # the data folder's files are lost
    backup_file = sorted(backups.glob("luna-*.db"))[0]
    restored = run_luna(tmp_path, llm_server.url, "restore", str(backup_file))
    assert restored.returncode == 0, restored.stderr
    assert "attachments: 2 copied back, 0 already there" in restored.stdout
    store = AttachmentStore(tmp_path / "data" / "attachments")
    assert set(store.hashes()) == hashes and all(store.verify(h) is None for h in hashes)


def test_restore_says_which_attachments_are_not_beside_the_backup(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    (tmp_path / "cat.jpg").write_bytes(photo(320, 240))
    llm_server.script(Reply(content="ok"))
    repl = start_repl(tmp_path, llm_server.url)
    _, err = repl.communicate("/attach cat.jpg\nhere\n", timeout=180)
    assert repl.returncode == 0, err
    elsewhere = tmp_path / "usb"
    elsewhere.mkdir()
    made = run_luna(tmp_path, llm_server.url, "backup", str(elsewhere / "luna.db"))
    assert made.returncode == 0, made.stderr
    assert (elsewhere / "attachments").is_dir()
    shutil.rmtree(elsewhere / "attachments")  # copied without its attachments folder
    shutil.rmtree(tmp_path / "data" / "attachments")
    restored = run_luna(tmp_path, llm_server.url, "restore", str(elsewhere / "luna.db"))
    assert restored.returncode == 0, restored.stderr
    assert "luna restore: 1 attachments it refers to are not beside" in restored.stderr
