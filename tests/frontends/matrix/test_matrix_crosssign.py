"""The bot cross-signs its own device, through a real Synapse: as the owner sees it on
``/keys/query``, the bot's device carries a valid signature of its self-signing key, which
its master key signed; the owner's Olm machine trusts the device as cross-signed; a restart
keeps the same keys, held in the data folder's crypto store."""

from __future__ import annotations

import sqlite3
from typing import Any

import httpx
from mautrix.crypto.cross_signing_key import CrossSigningSeeds
from mautrix.crypto.signature import verify_signature_json
from mautrix.types import DeviceID, TrustState, UserID

from luna.datafolder import matrix_crypto_file
from luna.doctor.matrix import check_matrix
from tests.conftest import Reply
from tests.frontends.matrix.conftest import World
from tests.frontends.matrix.test_matrix_encrypted import open_dm


async def keys_of(world: World, user_id: str) -> dict[str, Any]:
    """``/keys/query`` for every device of ``user_id``, asked as the owner."""
    async with httpx.AsyncClient(base_url=world.synapse.url, timeout=10) as http:
        resp = await http.post(
            "/_matrix/client/v3/keys/query",
            json={"device_keys": {user_id: []}},
            headers={"Authorization": f"Bearer {world.owner.account.access_token}"},
        )
    resp.raise_for_status()
    return resp.json()


def only_key(cross_signing_key: dict[str, Any]) -> str:
    (key,) = cross_signing_key["keys"].values()
    return str(key)


async def test_matrix_bot_device_is_signed_by_its_own_cross_signing_keys(world: World) -> None:
    luna = await world.start_luna()
    bot, device = world.bot.user_id, luna.frontend.conn.device_id if luna.frontend.conn else ""
    seen = await keys_of(world, bot)
    master = only_key(seen["master_keys"][bot])
    self_signing = seen["self_signing_keys"][bot]
    ssk = only_key(self_signing)
    assert verify_signature_json(self_signing, UserID(bot), master, master)
    device_keys = seen["device_keys"][bot][device]
    assert verify_signature_json(device_keys, UserID(bot), ssk, ssk)  # signed by its own SSK

    crypto = world.owner.client.crypto if world.owner.client else None
    assert crypto is not None
    identity = await crypto.get_or_fetch_device(UserID(bot), DeviceID(device))
    assert identity is not None
    assert await crypto.resolve_trust(identity) == TrustState.CROSS_SIGNED_TOFU

    store = matrix_crypto_file(luna.frontend.cfg.data_dir)
    await world.stop_luna()
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as conn:
        held = conn.execute("SELECT recovery_key FROM luna_cross_signing WHERE user_id = ?",
                            (bot,)).fetchall()  # fmt: skip
    assert len(held) == 1 and held[0][0]  # the keys and their recovery key, in crypto.db
    await world.start_luna()
    again = await keys_of(world, bot)
    assert only_key(again["master_keys"][bot]) == master  # the same keys: none made again
    assert verify_signature_json(again["device_keys"][bot][device], UserID(bot), ssk, ssk)


async def test_matrix_cross_signing_keys_made_elsewhere_are_left_alone(world: World) -> None:
    """The bot account already has a master key Luna does not hold: she never replaces it,
    signs nothing, still answers, and the doctor says whose keys they are not."""
    bot = world.bot.user_id
    elsewhere = CrossSigningSeeds.generate().to_keys().public_keys.master_key
    async with httpx.AsyncClient(base_url=world.synapse.url, timeout=10) as http:
        resp = await http.post(
            "/_matrix/client/v3/keys/device_signing/upload",
            json={"master_key": {"user_id": bot, "usage": ["master"],
                                 "keys": {f"ed25519:{elsewhere}": elsewhere}}},
            headers={"Authorization": f"Bearer {world.bot.access_token}"},
        )  # fmt: skip
    resp.raise_for_status()
    world.llm_server.script(Reply("still here"))
    luna = await world.start_luna()
    room = await open_dm(world)
    await world.owner.say(room, "hello")
    await world.owner.answer(room, bot, "still here")
    seen = await keys_of(world, bot)
    assert only_key(seen["master_keys"][bot]) == elsewhere  # not replaced
    assert bot not in seen.get("self_signing_keys", {})
    results = {r.name: r for r in await check_matrix(luna.frontend.cfg)}
    assert results["Matrix cross-signing"].ok is False
    assert "not the ones Luna holds" in results["Matrix cross-signing"].detail
