"""Everything Luna sends to a Matrix room: messages, edits, redactions, reactions, typing.

Job: :class:`Outbox` encrypts an event for an encrypted room (through mautrix's Olm machine)
and PUTs it to the homeserver itself, so that a ``429 M_LIMIT_EXCEEDED`` answer's
``retry_after_ms`` (which mautrix's client drops) reaches the channel layer, which waits it
out (``luna.frontends.channels.sending``).

Invariants:
- Errors are the channel layer's: ``M_LIMIT_EXCEEDED`` raises ``RateLimitedError`` with
  ``retry_after_ms`` (or ``Retry-After``; 1 s when neither says); ``M_TOO_LARGE`` (413)
  ``TooLongError``; a room Luna is not in (403) ``UnreachableError``; a redaction of a
  missing event (404) ``MessageGoneError``; any other HTTP error or a timeout
  ``ChannelError``. Nothing is retried here: one call, one request.
- Encryption: a room is encrypted when its state says so (asked of the homeserver once when
  the cache does not know); an encrypted room's events are never sent in the clear.
- ``rate_limited`` counts the 429 answers seen; ``early`` the events sent before the last
  429's ``retry_after_ms`` had passed (0 while the channel layer honours them; logged as
  ``matrix_send_early``). Every request has a timeout.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any, cast
from urllib.parse import quote

import httpx
from mautrix.client import Client
from mautrix.errors import MatrixRequestError, MNotFound
from mautrix.types import EventType, RoomID

from luna.frontends.channels.contract import (
    ChannelError,
    MessageGoneError,
    RateLimitedError,
    TooLongError,
    UnreachableError,
)
from luna.observe import log_event

log = logging.getLogger(__name__)

DEFAULT_RETRY_S = 1.0
TYPING_TIMEOUT_MS = 10_000


def _room(room_id: str) -> str:
    return f"/_matrix/client/v3/rooms/{quote(room_id, safe='')}"


class Outbox:
    """Sends for one logged-in client; ``close()`` releases the HTTP connection pool."""

    def __init__(self, client: Client, homeserver: str, timeout: float) -> None:
        self.client = client
        self.http = httpx.AsyncClient(base_url=homeserver.rstrip("/"), timeout=timeout)
        self.rate_limited = 0  # 429 answers seen
        self.early = 0  # events sent before a 429's retry_after had passed
        self._limited_until = 0.0  # monotonic end of the last 429's retry_after

    async def close(self) -> None:
        await self.http.aclose()

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.client.api.token}"}

    async def _put(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            resp = await self.http.put(path, json=body, headers=self._headers())
        except httpx.HTTPError as e:
            raise ChannelError(f"Matrix request failed: {type(e).__name__}") from e
        data = _json(resp)
        status, errcode = resp.status_code, str(data.get("errcode", ""))
        if status == 429:
            self.rate_limited += 1
            retry_ms = data.get("retry_after_ms")
            delay = retry_ms / 1000 if isinstance(retry_ms, int | float) else _header_s(resp)
            log_event("matrix_rate_limited", retry_after_ms=int(delay * 1000))
            self._limited_until = time.monotonic() + delay
            raise RateLimitedError(delay, f"the homeserver said {errcode or 429}")
        if status < 400:
            return data
        what = f"the homeserver refused it: {status} {errcode}".strip()
        if status == 413 or errcode == "M_TOO_LARGE":
            raise TooLongError(what, status=status)
        if status == 404:
            raise MessageGoneError(what, status=status)
        if status == 403:
            raise UnreachableError(what, status=status)
        raise ChannelError(what, status=status)

    async def is_encrypted(self, room_id: str) -> bool:
        state = self.client.state_store
        known = await state.is_encrypted(RoomID(room_id)) if state is not None else None
        if known is not None:
            return known
        try:
            await self.client.get_state_event(RoomID(room_id), EventType.ROOM_ENCRYPTION)
        except MNotFound:
            return False
        except MatrixRequestError as e:
            raise ChannelError(f"cannot read the room's encryption state: {e.errcode}") from e
        return True

    async def send(self, room_id: str, event_type: str, content: dict[str, Any]) -> str:
        """Send one room event (encrypted where the room is); its event id."""
        etype = EventType.find(event_type, EventType.Class.MESSAGE)
        body: dict[str, Any] = content
        if self.client.crypto and await self.is_encrypted(room_id):
            try:
                wire = cast(Any, content)  # event JSON: mautrix takes a dict as it is
                encrypted = await self.client.encrypt(RoomID(room_id), etype, wire)
            except MatrixRequestError as e:  # sharing the room key asked the homeserver
                raise ChannelError(f"encrypting for the room failed: {e.errcode}") from e
            etype, body = EventType.ROOM_ENCRYPTED, encrypted.serialize()
        path = f"{_room(room_id)}/send/{quote(str(etype), safe='')}/{uuid.uuid4().hex}"
        if time.monotonic() < self._limited_until:
            self.early += 1
            log_event(
                "matrix_send_early", left_ms=int((self._limited_until - time.monotonic()) * 1000)
            )
        event_id = (await self._put(path, body)).get("event_id")
        if not isinstance(event_id, str):
            raise ChannelError("the homeserver answered a send without an event id")
        return event_id

    async def redact(self, room_id: str, event_id: str) -> None:
        path = f"{_room(room_id)}/redact/{quote(event_id, safe='')}/{uuid.uuid4().hex}"
        await self._put(path, {})

    async def typing(self, room_id: str, is_typing: bool) -> None:
        """Show (for ``TYPING_TIMEOUT_MS``) or stop showing that Luna is typing."""
        path = f"{_room(room_id)}/typing/{quote(str(self.client.mxid), safe='')}"
        body: dict[str, Any] = {"typing": is_typing}
        if is_typing:
            body["timeout"] = TYPING_TIMEOUT_MS
        await self._put(path, body)


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
