"""``luna doctor``'s Matrix checks: the homeserver, the login, the device's keys, its
cross-signing, encryption.

Invariants:
- Nothing is changed anywhere: the homeserver is only asked (``/versions``, ``whoami``,
  ``keys/query``), a password is never used to log in (that would make a new access token),
  and the crypto store is opened read-only. The doctor runs in a process of its own, so
  reading ``crypto.db`` with the stdlib ``sqlite3`` never meets mautrix's connection in one
  process (see ``luna.frontends.matrix.connection``).
- Matrix not configured: one skipped line. Every request has a timeout.
- Cross-signing is checked as the homeserver shows it (``keys/query``: the device signed by
  the account's self-signing key, that key by the master key) against the keys Luna holds
  (``crypto.db``, ``luna.frontends.matrix.crosssign``); the private keys are read to derive
  their public halves and never shown.
"""

from __future__ import annotations

import asyncio
import base64
import sqlite3
from pathlib import Path
from typing import Any, cast

import httpx
from mautrix.crypto.cross_signing_key import CrossSigningSeeds
from mautrix.crypto.signature import SignedObject, verify_signature_json
from mautrix.types import SigningKey, UserID

from luna.config import Config
from luna.datafolder import MATRIX_CROSS_SIGNING_TABLE as TABLE
from luna.datafolder import matrix_crypto_file
from luna.doctor.result import CheckResult, fail, ok, skipped

TIMEOUT_S = 4.0


def _store_facts(path: Path) -> tuple[str, int, int] | None:
    """(device id, Megolm room keys, Olm sessions) in the crypto store; None when absent."""
    if not path.exists():
        return None
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2)
    try:
        row = conn.execute("SELECT device_id FROM crypto_account LIMIT 1").fetchone()
        megolm = conn.execute("SELECT count(*) FROM crypto_megolm_inbound_session").fetchone()
        olm = conn.execute("SELECT count(*) FROM crypto_olm_session").fetchone()
    finally:
        conn.close()
    return (str(row[0]) if row else "", int(megolm[0]), int(olm[0]))


async def _whoami(http: httpx.AsyncClient, token: str) -> tuple[str, str] | CheckResult:
    resp = await http.get(
        "/_matrix/client/v3/account/whoami", headers={"Authorization": f"Bearer {token}"}
    )
    if resp.status_code in (401, 403):
        return fail(
            "Matrix login",
            f"the homeserver refuses MATRIX_ACCESS_TOKEN ({resp.status_code})",
            "make a new access token for the bot's device (README, Matrix), or use MATRIX_PASSWORD",
        )
    resp.raise_for_status()
    data = resp.json()
    return str(data.get("user_id", "")), str(data.get("device_id", ""))


def _held_master(path: Path, user: str) -> str | None:
    """The public master key of the cross-signing keys Luna holds for ``user``, or None."""
    if not path.exists():
        return None
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=2)
    try:
        exists = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)
        ).fetchone()
        query = f"SELECT master, self_signing, user_signing FROM {TABLE} WHERE user_id = ?"
        row = conn.execute(query, (user,)).fetchone() if exists else None
    finally:
        conn.close()
    if row is None:
        return None
    seeds = CrossSigningSeeds(*(base64.b64decode(seed) for seed in row))
    return str(seeds.to_keys().public_keys.master_key)


async def _published(
    http: httpx.AsyncClient, token: str, user: str, device: str
) -> tuple[str | None, dict[str, Any]]:
    """(The device's published ed25519 key, its fingerprint, or None when it has none;
    the whole ``keys/query`` answer for it)."""
    resp = await http.post(
        "/_matrix/client/v3/keys/query",
        json={"device_keys": {user: [device]}},
        headers={"Authorization": f"Bearer {token}"},
    )
    resp.raise_for_status()
    seen = resp.json()
    keys = (seen.get("device_keys", {}).get(user) or {}).get(device)
    if not isinstance(keys, dict):
        return None, seen
    return str((keys.get("keys") or {}).get(f"ed25519:{device}") or "") or None, seen


def _only_key(seen: dict[str, Any], kind: str, user: str) -> tuple[dict[str, Any], str] | None:
    signed = (seen.get(kind) or {}).get(user)
    if not isinstance(signed, dict) or len(signed.get("keys") or {}) != 1:
        return None
    return signed, str(next(iter(signed["keys"].values())))


def cross_signing(seen: dict[str, Any], user: str, device: str, held: str | None) -> CheckResult:
    """The bot's cross-signing as the homeserver shows it, against the keys Luna holds."""
    name, uid = "Matrix cross-signing", UserID(user)
    master, self_signing = (_only_key(seen, k, user) for k in ("master_keys", "self_signing_keys"))
    if master is None:
        return fail(name, "the bot account has no cross-signing keys",
                    "start Luna: she makes them (the homeserver must allow the first upload "
                    "without user-interactive auth, MSC3967); until then verify her device "
                    "by its fingerprint")  # fmt: skip
    if held != master[1]:
        return fail(name, "the bot account's cross-signing keys are not the ones Luna holds",
                    "they were set up elsewhere; Luna leaves them: verify her device by its "
                    "fingerprint")  # fmt: skip
    device_keys = (seen.get("device_keys", {}).get(user) or {}).get(device) or {}

    def is_signed(data: dict[str, Any], key: str) -> bool:
        return verify_signature_json(cast(SignedObject, data), uid, key, SigningKey(key))

    signed = (
        self_signing is not None
        and is_signed(self_signing[0], master[1])
        and is_signed(device_keys, self_signing[1])
    )
    if not signed:
        return fail(name, f"device {device} is not signed by the account's self-signing key",
                    "restart Luna: she signs her device at start")  # fmt: skip
    return ok(name, f"device {device} signed by the bot's own keys: verify the bot user once")


def fingerprint(key: str) -> str:
    """An ed25519 key in groups of four, as Element shows a session key."""
    return " ".join(key[i : i + 4] for i in range(0, len(key), 4))


async def check_matrix(cfg: Config) -> list[CheckResult]:
    m = cfg.matrix
    if not m.homeserver:
        return [skipped("Matrix", "matrix.homeserver is not set")]
    results: list[CheckResult] = []
    async with httpx.AsyncClient(base_url=m.homeserver.rstrip("/"), timeout=TIMEOUT_S) as http:
        try:
            resp = await http.get("/_matrix/client/versions")
            resp.raise_for_status()
            versions = resp.json().get("versions", [])
            results.append(ok("Matrix homeserver", f"{m.homeserver} answers ({versions[-1:]})"))
        except (httpx.HTTPError, ValueError) as e:
            return [
                fail(
                    "Matrix homeserver",
                    f"{m.homeserver} does not answer the client API ({type(e).__name__})",
                    "check matrix.homeserver (the client-server API's base URL)",
                )
            ]
        facts = await asyncio.to_thread(_store_facts, matrix_crypto_file(cfg.data_dir))
        stored = facts[0] if facts else ""
        if m.access_token:
            who = await _whoami(http, m.access_token)
            if isinstance(who, CheckResult):
                return [*results, who]
            user, device = who
            if stored and device != stored:
                results.append(
                    fail(
                        "Matrix login",
                        f"the token is for device {device}, Luna's keys are device {stored}'s",
                        f"use an access token of device {stored}, or MATRIX_PASSWORD",
                    )
                )
            else:
                results.append(ok("Matrix login", f"{user}, device {device}"))
                key, seen = (
                    await _published(http, m.access_token, user, device) if stored else (None, {})
                )
                if stored and key is None:
                    results.append(
                        fail(
                            "Matrix device keys",
                            f"device {device} has no keys on the homeserver",
                            "start Luna once: it uploads them",
                        )
                    )
                elif key is not None:  # what the owner compares to verify her device
                    results.append(
                        ok("Matrix device keys", f"published; fingerprint {fingerprint(key)}")
                    )
                    held = await asyncio.to_thread(
                        _held_master, matrix_crypto_file(cfg.data_dir), user
                    )
                    results.append(cross_signing(seen, user, device, held))
        elif m.password:
            results.append(ok("Matrix login", f"MATRIX_PASSWORD set for {m.user_id or '?'}"))
        else:
            results.append(
                fail(
                    "Matrix login",
                    "neither MATRIX_ACCESS_TOKEN nor MATRIX_PASSWORD is set",
                    "put one in the environment (/etc/luna/luna.env for the service)",
                )
            )
    if facts is None:
        results.append(ok("Matrix encryption", "no device keys yet: made at Luna's first start"))
    else:
        _, megolm, olm = facts
        results.append(
            ok(
                "Matrix encryption",
                f"device {stored}: {megolm} room keys, {olm} Olm sessions "
                f"(data folder, matrix/crypto.db); trusts {m.trust} devices",
            )
        )
    return results
