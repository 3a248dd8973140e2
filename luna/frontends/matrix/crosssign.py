"""The bot's cross-signing: its own master, self-signing and user-signing keys, made at the
first start, and its device signed with them, so that an owner who verifies the bot's *user*
(Element: "Verify user") trusts its device without comparing fingerprints.

Job: :func:`cross_sign` runs once per start, after the device keys are shared, and says (and
logs, as ``matrix_cross_signing``) the account's state: ``cross-signed`` (the keys on the
homeserver are Luna's and her device is signed with them), ``foreign`` (the account has
cross-signing keys Luna does not hold), ``refused`` (the homeserver wants more than Luna
can give, e.g. user-interactive auth) or ``failed`` (the homeserver could not be asked).

Invariants:
- The private keys (mautrix's 32-byte seeds) are written to the crypto store
  (``crypto.db``, table ``luna_cross_signing``, backed up with the data folder) before they
  are published: a start that dies in between publishes the same keys at the next start, and
  Luna never publishes keys she does not hold. The recovery key that unlocks their copy in
  the account's secret storage (SSSS, where Element looks) is kept beside them. Neither is
  ever logged.
- Keys already on the homeserver that are not Luna's are never replaced (someone set up
  cross-signing for the bot account elsewhere; replacing them would drop every trust in it).
- The first upload is made without user-interactive auth (Synapse allows the first one,
  MSC3967); a homeserver that asks for it gets none: state ``refused``, said in the log and
  by ``luna doctor``.
- The device is signed at every start while the keys are Luna's (one idempotent upload): a
  start that died after publishing and before signing is completed by the next.
- Nothing here stops the start: cross-signing is for trust, not for reading rooms. Every
  homeserver call is bounded by ``deadline``.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from typing import Literal

from mautrix.crypto import OlmMachine
from mautrix.crypto.cross_signing_key import CrossSigningSeeds
from mautrix.errors import MatrixConnectionError, MatrixRequestError
from mautrix.util.async_db import Database

from luna.datafolder import MATRIX_CROSS_SIGNING_TABLE as TABLE
from luna.observe import log_event

log = logging.getLogger(__name__)

State = Literal["cross-signed", "foreign", "refused", "failed"]


async def _ensure_table(db: Database) -> None:
    await db.execute(
        f"CREATE TABLE IF NOT EXISTS {TABLE} (user_id TEXT PRIMARY KEY, master TEXT NOT NULL, "
        "self_signing TEXT NOT NULL, user_signing TEXT NOT NULL, recovery_key TEXT)"
    )


def _b64(seed: bytes) -> str:
    return base64.b64encode(seed).decode()


async def held_seeds(db: Database, user_id: str) -> CrossSigningSeeds | None:
    """The cross-signing private keys Luna holds for ``user_id``, or None."""
    await _ensure_table(db)
    row = await db.fetchrow(
        f"SELECT master, self_signing, user_signing FROM {TABLE} WHERE user_id = $1", user_id
    )
    if row is None:
        return None
    seed = [base64.b64decode(row[k]) for k in ("master", "self_signing", "user_signing")]
    return CrossSigningSeeds(*seed)


async def _keep_seeds(db: Database, user_id: str, seeds: CrossSigningSeeds) -> None:
    await db.execute(
        f"INSERT INTO {TABLE} (user_id, master, self_signing, user_signing) "
        "VALUES ($1, $2, $3, $4)",
        user_id,
        _b64(seeds.master_key),
        _b64(seeds.self_signing_key),
        _b64(seeds.user_signing_key),
    )


async def _keep_recovery_key(db: Database, user_id: str, recovery_key: str) -> None:
    await db.execute(
        f"UPDATE {TABLE} SET recovery_key = $2 WHERE user_id = $1", user_id, recovery_key
    )


async def _cross_sign(crypto: OlmMachine, db: Database) -> State:
    user_id = str(crypto.client.mxid)
    seeds = await held_seeds(db, user_id)
    public = await crypto.get_own_cross_signing_public_keys()
    if public is None:  # the account has none yet: make (or finish publishing) Luna's
        if seeds is None:
            seeds = CrossSigningSeeds.generate()
            await _keep_seeds(db, user_id, seeds)  # held before published
        recovery_key = await crypto.generate_recovery_key(seeds=seeds)  # publishes, signs
        await _keep_recovery_key(db, user_id, recovery_key)
        return "cross-signed"
    if seeds is None or public.master_key != seeds.to_keys().public_keys.master_key:
        return "foreign"
    crypto._import_cross_signing_keys(seeds)  # mautrix has no public door for held keys
    await crypto.sign_own_device(crypto.own_identity)
    return "cross-signed"


async def cross_sign(crypto: OlmMachine, db: Database, *, deadline: float) -> State:
    """Make sure the bot's device is signed by its own cross-signing keys (see module)."""
    try:
        async with asyncio.timeout(deadline):
            state = await _cross_sign(crypto, db)
    except MatrixRequestError as e:
        state = "refused" if e.http_status in (401, 403) else "failed"
        log.warning("matrix: cross-signing the bot's device failed: %s", type(e).__name__)
    except (MatrixConnectionError, OSError, TimeoutError, ValueError) as e:
        # ValueError: mautrix's own refusals (device keys not shared yet, a damaged SSSS key)
        state = "failed"
        log.warning("matrix: cross-signing the bot's device failed: %s", type(e).__name__)
    if state == "foreign":
        log.warning("matrix: the bot account has cross-signing keys Luna does not hold")
    log_event("matrix_cross_signing", state=state, device_id=str(crypto.client.device_id))
    return state
