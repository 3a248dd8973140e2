"""The bot's Matrix connection: login, its device, and the Olm machine that holds its keys.

Job: :func:`connect` returns a logged-in mautrix ``Client`` whose ``crypto`` is an
``OlmMachine`` over the crypto store ``<data>/matrix/crypto.db``; :meth:`Connection.close`
closes both.

Invariants:
- The device's identity keys, Olm sessions and Megolm room keys (and mautrix's room-state
  cache) live only in ``crypto.db``, in the data folder: they survive restarts, and a restart
  keeps the same device, so every room key Luna ever received still decrypts. The file is
  opened by mautrix's aiosqlite (the stdlib ``sqlite3``) and by nothing else of Luna's in the
  same process: two SQLite libraries on one file in one process can corrupt it (sqlite.org,
  "How To Corrupt", 2.2.1), so Luna's own pysqlite3 never touches it.
- The login comes from the environment (``MATRIX_ACCESS_TOKEN``, else ``MATRIX_PASSWORD``).
  A password login reuses the device in ``crypto.db``; an access token must belong to that
  device, or the start is refused (a new device could not read the old rooms' history, and
  Luna never discards keys by itself).
- Device trust: room keys go to devices at ``matrix.trust`` or better ("cross-signed":
  signed by their account's cross-signing key, first key trusted on first use); key requests
  are answered for the same devices.
- Errors become ConfigError (bad login, wrong device) or MatrixError (homeserver trouble).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from mautrix.api import HTTPAPI
from mautrix.client import Client
from mautrix.crypto import OlmMachine
from mautrix.crypto.store.asyncpg import PgCryptoStateStore, PgCryptoStore
from mautrix.errors import MatrixConnectionError, MatrixInvalidToken, MatrixRequestError, MForbidden
from mautrix.types import (
    DeviceID,
    LoginType,
    MatrixUserIdentifier,
    TrustState,
    UserID,
    UserIdentifier,
)
from mautrix.util.async_db import Database

from luna import datafolder
from luna.config import MatrixConfig
from luna.errors import ConfigError, MatrixError

log = logging.getLogger(__name__)

CRYPTO_DB = "crypto.db"
# The Olm pickles' key. The crypto store sits in the data folder, whose permissions guard it
# like the database; a key kept beside it would add nothing, so it is a fixed string.
PICKLE_KEY = "luna.matrix.crypto"
TRUST = {"cross-signed": TrustState.CROSS_SIGNED_TOFU, "unverified": TrustState.UNVERIFIED}


def crypto_path(data_dir: Path) -> Path:
    return datafolder.matrix_crypto_file(data_dir)


@dataclass
class Connection:
    client: Client
    crypto: OlmMachine
    db: Database

    @property
    def user_id(self) -> str:
        return str(self.client.mxid)

    @property
    def device_id(self) -> str:
        return str(self.client.device_id)

    async def close(self) -> None:
        self.client.stop()
        await self.client.api.session.close()
        await self.db.stop()


async def open_store(path: Path) -> Database:
    """The crypto store's database, created and upgraded to mautrix's schema when needed."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    db = Database.create(
        f"sqlite:{path}",
        upgrade_table=PgCryptoStore.upgrade_table,
        db_args={"init_commands": ["PRAGMA synchronous = FULL"]},  # keys survive power loss
        log=logging.getLogger("luna.matrix.store"),
    )
    await db.start()
    await PgCryptoStateStore.upgrade_table.upgrade(db)
    return db


async def _login(client: Client, cfg: MatrixConfig, stored: DeviceID | None) -> None:
    if cfg.access_token:
        who = await client.whoami()
        if cfg.user_id and who.user_id != cfg.user_id:
            raise ConfigError(
                f"MATRIX_ACCESS_TOKEN belongs to {who.user_id}, not matrix.user_id {cfg.user_id}"
            )
        if stored and who.device_id != stored:
            raise ConfigError(
                f"MATRIX_ACCESS_TOKEN is for device {who.device_id}, but Luna's keys "
                f"(data folder, matrix/{CRYPTO_DB}) belong to device {stored}; use a token of "
                f"device {stored}, or MATRIX_PASSWORD (Luna then logs that device in again)"
            )
        if who.device_id is None:  # Luna's end-to-end keys belong to a device
            raise ConfigError("MATRIX_ACCESS_TOKEN has no device; use MATRIX_PASSWORD instead")
        client.mxid, client.device_id = who.user_id, who.device_id
        return
    if not cfg.user_id:
        raise ConfigError("matrix.user_id must be set to log in with MATRIX_PASSWORD")
    await client.login(
        identifier=UserIdentifier(MatrixUserIdentifier(UserID(cfg.user_id))),
        login_type=LoginType.PASSWORD,
        password=cfg.password,
        device_name=cfg.device_name,
        device_id=stored,
        store_access_token=True,
        update_hs_url=False,
    )


async def connect(cfg: MatrixConfig, data_dir: Path) -> Connection:
    """Log in and load (or create, the first time) the bot's device keys."""
    if not (cfg.access_token or cfg.password):
        raise ConfigError("Matrix needs MATRIX_ACCESS_TOKEN or MATRIX_PASSWORD in the environment")
    db = await open_store(crypto_path(data_dir))
    try:
        api = HTTPAPI(base_url=cfg.homeserver, token=cfg.access_token)
        state = PgCryptoStateStore(db)
        client = Client(mxid=UserID(cfg.user_id), api=api, state_store=state)
        account_id = cfg.user_id or "luna"
        store = PgCryptoStore(account_id=account_id, pickle_key=PICKLE_KEY, db=db)
        try:
            await _login(client, cfg, await store.get_device_id() or None)
        except MatrixInvalidToken as e:
            raise ConfigError(f"the homeserver refused Luna's Matrix login ({e.errcode})") from e
        except MForbidden as e:
            raise ConfigError(f"the homeserver refused Luna's Matrix login ({e.errcode})") from e
        except (MatrixRequestError, MatrixConnectionError, OSError) as e:
            raise MatrixError(f"cannot reach the homeserver {cfg.homeserver}: {e}") from e
        crypto = OlmMachine(client, store, state)
        crypto.send_keys_min_trust = TRUST[cfg.trust]
        crypto.share_keys_min_trust = TRUST[cfg.trust]
        await store.put_device_id(client.device_id)
        await crypto.load()
        await store.put_device_id(client.device_id)
        client.crypto = crypto  # EncryptingAPI's setter: no automatic decryption dispatcher
        await crypto.share_keys()  # device keys (once) and one-time keys
        log.info("matrix: logged in as %s, device %s", client.mxid, client.device_id)
        return Connection(client, crypto, db)
    except BaseException:
        await db.stop()
        raise
