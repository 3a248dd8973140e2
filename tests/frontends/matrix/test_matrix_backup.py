"""The Matrix crypto store goes with ``luna backup`` and comes back with ``luna restore``,
through a real Synapse: a restored data folder is still the same device and still reads the
encrypted room it read before."""

from __future__ import annotations

import asyncio

from mautrix.types import EncryptedEvent, EventID, RoomID

from luna import datafolder
from luna.memory.storage import backup, backup_crypto
from tests.conftest import Reply
from tests.frontends.matrix.conftest import World


async def test_matrix_restored_data_folder_still_reads_its_encrypted_room(world: World) -> None:
    world.llm_server.script(Reply("first answer"), Reply("second answer"))
    luna = await world.start_luna()
    cfg = luna.frontend.cfg
    room = await world.owner.create_room([world.bot.user_id], encrypted=True, direct=True)
    await world.owner.wait_joined(room, world.bot.user_id)
    first = await world.owner.say(room, "message one, before the backup")
    await world.owner.answer(room, world.bot.user_id, "first answer")
    made = await asyncio.to_thread(backup.make_backup, cfg.memory.db_path)  # while running
    assert made.crypto is not None and made.crypto.device_id == world.bot.device_id
    assert made.crypto.path == backup_crypto.copy_of(made.path) and made.crypto.path.is_file()
    await world.stop_luna()

    crypto = datafolder.matrix_crypto_file(cfg.data_dir)  # the data folder is lost
    for path in (crypto, *crypto.parent.glob("crypto.db-*"), cfg.memory.db_path):
        path.unlink()
    done = await asyncio.to_thread(backup.restore_file, cfg.memory.db_path, made.path)
    assert done.crypto is not None and done.crypto.device_id == world.bot.device_id
    assert crypto.is_file() and done.crypto.aside == ()

    luna = await world.start_luna()
    conn = luna.frontend.conn
    assert conn is not None and conn.device_id == world.bot.device_id  # the same device
    raw = await conn.client.get_event(RoomID(room), EventID(first))
    assert isinstance(raw, EncryptedEvent)  # the history: decrypted with the restored keys
    old = await conn.crypto.decrypt_megolm_event(raw)
    assert old.content.body == "message one, before the backup"
    await world.owner.say(room, "message two, after the restore")
    msgs = await world.owner.answer(room, world.bot.user_id, "second answer", count=2)
    assert len(msgs) == 2  # answered once each, the reply decrypted by the owner's device
    asked = [r["messages"][-1]["content"] for r in world.llm_server.requests]
    assert any("message two, after the restore" in a for a in asked)
    assert sum("message one" in a for a in asked) == 1
