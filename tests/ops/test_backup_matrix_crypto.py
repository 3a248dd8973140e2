"""The Matrix crypto store with ``luna backup`` and ``luna restore`` (real ``python -m luna``
processes): copied beside the backup, put back with the current one kept aside, its
outbound Megolm sessions dropped, and pruned with the daily backups it belonged to. (That a
restored store still reads its encrypted room, through Synapse:
``tests/frontends/matrix/test_matrix_backup.py``.)"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

from luna import datafolder
from luna.memory import Memory
from luna.memory.storage import backup, backup_crypto
from tests.fakes.llm_server import FakeLLMServer
from tests.ops.running_luna import run_luna


def fake_crypto_store(path: Path, device: str) -> None:
    """A crypto store with mautrix's tables that matter here (written as mautrix does: WAL)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("CREATE TABLE crypto_account (account_id TEXT PRIMARY KEY, "
                     "device_id TEXT, account BLOB)")  # fmt: skip
        conn.execute("CREATE TABLE crypto_megolm_inbound_session (session_id TEXT, s BLOB)")
        conn.execute("CREATE TABLE crypto_megolm_outbound_session (room_id TEXT, s BLOB)")
        conn.execute("INSERT INTO crypto_account VALUES ('@luna:x', ?, x'00ff')", (device,))
        conn.execute("INSERT INTO crypto_megolm_inbound_session VALUES ('in1', x'01')")
        conn.execute("INSERT INTO crypto_megolm_outbound_session VALUES ('!r:x', x'02')")
    conn.close()


def rows(path: Path, table: str) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute(f"SELECT * FROM {table}").fetchall()
    finally:
        conn.close()


async def make_database(luna_config: Callable[..., Any]) -> Path:
    cfg = luna_config()
    memory = Memory(cfg.memory)
    await memory.open(background=False, use_vectors=False)
    await memory.close()
    return cfg.memory.db_path


async def test_backup_keeps_the_matrix_crypto_store_and_restore_puts_it_back(
    tmp_path: Path, llm_server: FakeLLMServer, luna_config: Callable[..., Any]
) -> None:
    db = await make_database(luna_config)
    crypto = datafolder.matrix_crypto_file(db.parent)
    fake_crypto_store(crypto, "DEVICEA")
    made = run_luna(tmp_path, llm_server.url, "backup", str(tmp_path / "b.db"))
    assert made.returncode == 0, made.stderr
    copy = tmp_path / "matrix-crypto" / "b.db"
    assert f"Matrix crypto store (device DEVICEA): {copy}" in made.stdout
    assert rows(copy, "crypto_account") == rows(crypto, "crypto_account")
    assert rows(copy, "crypto_megolm_outbound_session") == [("!r:x", b"\x02")]  # as it was

    with sqlite3.connect(crypto) as conn:  # the store moves on after the backup
        conn.execute("INSERT INTO crypto_megolm_inbound_session VALUES ('in2', x'03')")
    conn.close()
    restored = run_luna(tmp_path, llm_server.url, "restore", str(tmp_path / "b.db"))
    assert restored.returncode == 0, restored.stderr
    assert "Matrix crypto store of device DEVICEA put back" in restored.stdout
    (aside,) = crypto.parent.glob("crypto.db.before-restore-*[0-9]")
    assert f"the previous Matrix crypto store is kept as {aside}" in restored.stdout
    assert len(rows(aside, "crypto_megolm_inbound_session")) == 2  # kept, never deleted
    assert rows(crypto, "crypto_account") == [("@luna:x", "DEVICEA", b"\x00\xff")]
    assert rows(crypto, "crypto_megolm_inbound_session") == [("in1", b"\x01")]
    assert rows(crypto, "crypto_megolm_outbound_session") == []  # new ones, never a replay


async def test_backup_without_matrix_leaves_the_crypto_store_alone(
    tmp_path: Path, llm_server: FakeLLMServer, luna_config: Callable[..., Any]
) -> None:
    db = await make_database(luna_config)
    made = run_luna(tmp_path, llm_server.url, "backup", str(tmp_path / "b.db"))
    assert made.returncode == 0 and "Matrix" not in made.stdout
    crypto = datafolder.matrix_crypto_file(db.parent)
    fake_crypto_store(crypto, "LATER")  # Matrix set up after that backup
    restored = run_luna(tmp_path, llm_server.url, "restore", str(tmp_path / "b.db"))
    assert restored.returncode == 0 and "Matrix" not in restored.stdout
    assert rows(crypto, "crypto_account")[0][1] == "LATER"


async def test_rotation_prunes_the_crypto_copies_of_deleted_daily_backups(
    luna_config: Callable[..., Any],
) -> None:
    db = await make_database(luna_config)
    fake_crypto_store(datafolder.matrix_crypto_file(db.parent), "DEVICEA")
    folder = datafolder.backups_dir(db)
    made = []
    for i in range(3):
        target = folder / f"{backup.AUTO_PREFIX}2026120{i + 1}-000000Z.db"
        made.append(backup.make_backup(db, target, auto=True))
        os.utime(target, (1_000_000 + i, 1_000_000 + i))
    assert all(m.crypto is not None and m.crypto.path.is_file() for m in made)
    removed = backup.rotate(db, keep=1)
    assert removed == [m.path for m in made[:2]]
    copies = sorted(p.name for p in (folder / backup_crypto.FOLDER).iterdir())
    assert copies == [made[2].path.name]
