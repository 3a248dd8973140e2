"""Everything Luna sends to a Matrix room: messages, edits, reactions, typing, within rate limits.

Job: :class:`Outbox` encrypts an event for an encrypted room (through mautrix's Olm machine)
and PUTs it to the homeserver itself, so that a ``429 M_LIMIT_EXCEEDED`` answer's
``retry_after_ms`` (which mautrix's client drops) is read and honoured.

Invariants:
- A send keeps its transaction id across retries: the homeserver stores it once however
  often it is retried.
- ``M_LIMIT_EXCEEDED``: wait ``retry_after_ms`` (or ``Retry-After``; 1 s when neither says),
  then retry, for at most ``MAX_RATE_WAIT_S`` of waiting in all; then MatrixError. Other HTTP
  errors and timeouts raise MatrixError at once. Every request has a timeout.
- Encryption: a room is encrypted when its state says so (asked of the homeserver once when
  the cache does not know); an encrypted room's events are never sent in the clear.
- ``waited_s`` adds up the time spent waiting on rate limits (tests and logs read it).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any
from urllib.parse import quote

import httpx
from mautrix.client import Client
from mautrix.errors import MNotFound
from mautrix.types import EventType, RoomID

from luna.errors import MatrixError
from luna.observe import log_event

log = logging.getLogger(__name__)

MAX_RATE_WAIT_S = 120.0
DEFAULT_RETRY_S = 1.0
TYPING_TIMEOUT_MS = 30_000


class Outbox:
    """Sends for one logged-in client; ``close()`` releases the HTTP connection pool."""

    def __init__(self, client: Client, homeserver: str, timeout: float) -> None:
        self.client = client
        self.http = httpx.AsyncClient(base_url=homeserver.rstrip("/"), timeout=timeout)
        self.waited_s = 0.0
        self.rate_limited = 0  # how many 429 answers were honoured

    async def close(self) -> None:
        await self.http.aclose()

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.client.api.token}"}

    async def _put(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        waited = 0.0
        while True:
            try:
                resp = await self.http.put(path, json=body, headers=self._headers())
            except httpx.HTTPError as e:
                raise MatrixError(f"Matrix request failed: {type(e).__name__}") from e
            if resp.status_code != 429:
                break
            data = _json(resp)
            retry_ms = data.get("retry_after_ms")
            delay = retry_ms / 1000 if isinstance(retry_ms, int | float) else _header_s(resp)
            if waited + delay > MAX_RATE_WAIT_S:
                raise MatrixError(f"the homeserver rate-limits Luna for {delay:.0f} s more")
            self.rate_limited += 1
            log_event("matrix_rate_limited", retry_after_ms=int(delay * 1000))
            await asyncio.sleep(delay)
            waited += delay
            self.waited_s += delay
        if resp.status_code >= 400:
            data = _json(resp)
            raise MatrixError(
                f"the homeserver refused a send: {resp.status_code} {data.get('errcode', '')}"
            )
        return _json(resp)

    async def _is_encrypted(self, room_id: str) -> bool:
        state = self.client.state_store
        known = await state.is_encrypted(RoomID(room_id)) if state is not None else None
        if known is not None:
            return known
        try:
            await self.client.get_state_event(RoomID(room_id), EventType.ROOM_ENCRYPTION)
        except MNotFound:
            return False
        return True

    async def send(self, room_id: str, event_type: str, content: dict[str, Any]) -> str:
        """Send one room event (encrypted where the room is); its event id."""
        etype = EventType.find(event_type, EventType.Class.MESSAGE)
        body: dict[str, Any] = content
        if self.client.crypto and await self._is_encrypted(room_id):
            # mautrix encrypts any JSON object; its annotation lists only its content classes
            encrypted = await self.client.encrypt(RoomID(room_id), etype, content)  # type: ignore[arg-type]
            etype, body = EventType.ROOM_ENCRYPTED, encrypted.serialize()
        txn = uuid.uuid4().hex
        path = (
            f"/_matrix/client/v3/rooms/{quote(room_id, safe='')}/send/"
            f"{quote(str(etype), safe='')}/{txn}"
        )
        started = time.monotonic()
        data = await self._put(path, body)
        event_id = data.get("event_id")
        if not isinstance(event_id, str):
            raise MatrixError("the homeserver answered a send without an event id")
        log.debug("matrix: sent %s in %.2f s", event_type, time.monotonic() - started)
        return event_id

    async def typing(self, room_id: str, is_typing: bool) -> None:
        """Show (or stop showing) that Luna is typing; failures are logged, never raised."""
        path = (
            f"/_matrix/client/v3/rooms/{quote(room_id, safe='')}/typing/"
            f"{quote(str(self.client.mxid), safe='')}"
        )
        body: dict[str, Any] = {"typing": is_typing}
        if is_typing:
            body["timeout"] = TYPING_TIMEOUT_MS
        try:
            await self._put(path, body)
        except MatrixError as e:
            log_event("matrix_error", op="typing", error=str(e))


def _json(resp: httpx.Response) -> dict[str, Any]:
    try:
        data = resp.json()
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _header_s(resp: httpx.Response) -> float:
    try:
        return max(0.0, float(resp.headers.get("Retry-After", "")))
    except ValueError:
        return DEFAULT_RETRY_S
