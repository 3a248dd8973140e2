"""The Matrix sync loop: keys first, then each room's new messages in order, then the token.

Job: :class:`SyncLoop` long-polls ``/sync`` from the token saved in the database, lets
mautrix's Olm machine take in the batch's to-device events (room keys), device lists and room
state, then decrypts and translates the joined rooms' timeline events in order and hands each
to ``deliver``; invites go to ``on_invite``. Only then is the batch's ``next_batch`` saved.

Invariants:
- Keys before messages: every handler mautrix registered (the Olm machine's to-device and
  device-list handlers, the state store) runs to completion for a batch before its timeline
  is read, so a room key and the message it opens, arriving together, decrypt in one pass.
- A token is saved only after its batch was delivered (``luna.frontends.matrix.sync_token``):
  a restart neither loses a message nor, but for a stop inside that last commit, repeats one.
- History is never answered: the first sync of an account (no saved token) delivers nothing
  from timelines, and in a room Luna has just joined, events before her own join are skipped.
- An encrypted event whose room key is still missing waits for it in the background (up to
  ``KEY_WAIT_S``), never holding up the loop; one that never decrypts is logged
  (``matrix_undecryptable``) and dropped.
- An encrypted message whose sender's device is below ``min_trust`` is dropped and logged
  (``matrix_untrusted_device``): Luna does not take it as that person's.
- A failing sync waits (1 s doubling to 60 s) and tries again; a rejected token ends the loop
  with MatrixError. Every request has a timeout.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from mautrix.client import InternalEventType
from mautrix.errors import DecryptionError, MatrixInvalidToken, MatrixRequestError, SessionNotFound
from mautrix.types import JSON, EncryptedEvent, SyncToken, TrustState

from luna.errors import MatrixError
from luna.frontends.matrix.connection import Connection
from luna.frontends.matrix.events import Reaction, RoomMessage, parse
from luna.frontends.matrix.sync_token import SyncTokens
from luna.observe import log_event

log = logging.getLogger(__name__)

POLL_MS = 30_000
KEY_WAIT_S = 30.0
MAX_BACKOFF_S = 60.0

Deliver = Callable[[RoomMessage | Reaction], Awaitable[None]]
OnInvite = Callable[[str, str], Awaitable[None]]  # (room_id, inviter)


def await_handlers(conn: Connection) -> None:
    """Make every handler mautrix registered one that a batch waits for (see invariants)."""
    client = conn.client
    for event_type, handlers in list(client.event_handlers.items()):
        for handler, props in list(handlers.items()):
            handlers[handler] = props._replace(wait_sync=True)
        client.event_handlers[event_type] = handlers
    for handler, props in list(client.global_event_handlers.items()):
        client.global_event_handlers[handler] = props._replace(wait_sync=True)


def _history_cut(events: list[dict[str, Any]], bot_id: str) -> int:
    """Index of the first event after Luna's own join in this batch (0: no join in it)."""
    cut = 0
    for i, ev in enumerate(events):
        if (
            ev.get("type") == "m.room.member"
            and ev.get("state_key") == bot_id
            and (ev.get("content") or {}).get("membership") == "join"
        ):
            cut = i + 1
    return cut


class SyncLoop:
    """Sync until stopped; see the module invariants."""

    def __init__(
        self,
        conn: Connection,
        tokens: SyncTokens,
        deliver: Deliver,
        on_invite: OnInvite,
        *,
        min_trust: TrustState,
        request_timeout: float,
    ) -> None:
        self.conn = conn
        self.tokens = tokens
        self.deliver = deliver
        self.on_invite = on_invite
        self.min_trust = min_trust
        self.request_timeout = request_timeout
        self._waiting: set[asyncio.Task[None]] = set()
        self.batches = 0  # synced batches handled since start
        await_handlers(conn)

    async def run(self, stop: asyncio.Event) -> None:
        token = await self.tokens.load(self.conn.user_id)
        backoff = 1.0
        try:
            while not stop.is_set():
                try:
                    data = await asyncio.wait_for(
                        self.conn.client.sync(
                            since=SyncToken(token) if token is not None else None,
                            timeout=POLL_MS if token else 0,
                        ),
                        POLL_MS / 1000 + self.request_timeout,
                    )
                except MatrixInvalidToken as e:
                    raise MatrixError(f"the homeserver no longer accepts Luna's login: {e}") from e
                except (MatrixRequestError, TimeoutError, OSError) as e:
                    log_event("matrix_error", op="sync", error=type(e).__name__)
                    await asyncio.sleep(backoff)
                    backoff = min(MAX_BACKOFF_S, backoff * 2)
                    continue
                except Exception as e:  # aiohttp's own errors (a dropped connection)
                    if type(e).__module__.startswith("aiohttp"):
                        log_event("matrix_error", op="sync", error=type(e).__name__)
                        await asyncio.sleep(backoff)
                        backoff = min(MAX_BACKOFF_S, backoff * 2)
                        continue
                    raise
                backoff = 1.0
                await self.handle(data, is_first=token is None)
                token = str(data["next_batch"])
                await self.tokens.save(self.conn.user_id, token)
                self.batches += 1
        finally:
            for task in self._waiting:
                task.cancel()
            await asyncio.gather(*self._waiting, return_exceptions=True)

    async def handle(self, data: dict[str, Any], *, is_first: bool) -> None:
        """Keys and state, invites, then (unless this is the first sync) new messages."""
        await asyncio.gather(*self.conn.client.handle_sync(JSON(data)))
        await self.conn.client.run_internal_event(InternalEventType.SYNC_SUCCESSFUL, data=data)
        rooms = data.get("rooms") or {}
        for room_id, room in (rooms.get("invite") or {}).items():
            inviter = self._inviter(room)
            if inviter:
                await self.on_invite(room_id, inviter)
        if is_first:
            return
        bot = self.conn.user_id
        for room_id, room in (rooms.get("join") or {}).items():
            events = list((room.get("timeline") or {}).get("events") or [])
            for raw in events[_history_cut(events, bot) :]:
                raw["room_id"] = room_id
                await self._one(raw)

    def _inviter(self, room: dict[str, Any]) -> str | None:
        for ev in (room.get("invite_state") or {}).get("events") or []:
            content = ev.get("content") or {}
            if ev.get("state_key") == self.conn.user_id and content.get("membership") == "invite":
                return str(ev.get("sender") or "")
        return None

    async def _one(self, raw: dict[str, Any]) -> None:
        if raw.get("type") != "m.room.encrypted":
            await self._hand_over(raw)
            return
        try:
            event = EncryptedEvent.deserialize(JSON(raw))
        except Exception:  # malformed wire data: drop it, say so
            log_event("matrix_undecryptable", event_id=str(raw.get("event_id")), why="malformed")
            return
        if event.sender == self.conn.user_id:
            return
        try:
            await self._decrypt_and_hand_over(event)
        except SessionNotFound:
            task = asyncio.get_running_loop().create_task(self._wait_for_key(event))
            self._waiting.add(task)
            task.add_done_callback(self._waiting.discard)

    async def _decrypt_and_hand_over(self, event: EncryptedEvent) -> None:
        try:
            decrypted = await self.conn.crypto.decrypt_megolm_event(event)
        except SessionNotFound:
            raise
        except DecryptionError as e:
            log_event("matrix_undecryptable", event_id=event.event_id, why=type(e).__name__)
            return
        trust = decrypted.get("mautrix", {}).get("trust_state", TrustState.UNVERIFIED)
        if trust < self.min_trust:
            log_event(
                "matrix_untrusted_device",
                event_id=event.event_id,
                sender=event.sender,
                trust=str(trust),
            )
            return
        raw = decrypted.serialize()
        raw.pop("mautrix", None)
        raw["room_id"] = event.room_id
        await self._hand_over(raw)

    async def _wait_for_key(self, event: EncryptedEvent) -> None:
        content = event.content
        found = await self.conn.crypto.wait_for_session(
            event.room_id, content.session_id, timeout=KEY_WAIT_S
        )
        if not found:
            log_event("matrix_undecryptable", event_id=event.event_id, why="no room key")
            return
        try:
            await self._decrypt_and_hand_over(event)
        except SessionNotFound:
            log_event("matrix_undecryptable", event_id=event.event_id, why="no room key")

    async def _hand_over(self, raw: dict[str, Any]) -> None:
        item = parse(raw, self.conn.user_id)
        if item is not None:
            await self.deliver(item)
