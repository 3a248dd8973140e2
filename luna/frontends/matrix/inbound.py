"""Matrix room messages in the channel layer's terms: a ``RoomMessage`` becomes an
``InboundEvent``.

Job: :class:`Inbound` adds what one event does not say by itself (is the room direct, does
the message reply to one of Luna's events, is its thread one she answers in) and translates;
:func:`incoming_file` describes a message's ``mxc://`` file for the layer, downloaded (and
decrypted) only when read. :data:`CODEC` keeps an event in the channel ledger for a turn a
restart must finish.

Invariants:
- A direct room (Luna and one other member) is private: every message addresses her. In a
  bigger room a message addresses her when it mentions her, replies to one of her events, or
  is in a thread she follows (rooted at one of her events, or one she answered in or was
  admitted in: ``channels.following``, which survives a restart). The rule of who is heard
  is the layer's.
- The bot's full user id is removed from the text of a message that mentions her.
- The event id is the replay and duplicate key; the answer goes to the thread, or in a
  bigger room as a reply to the message (``conversation.Room``).
- A file over ``cap`` bytes, or one that cannot be had or decrypted, raises ``ChannelError``
  when read (the layer says so in one line); ``read_capped`` stops past its limit.
- An event read back from the ledger answers where the original would have: the same room,
  thread and replied-to event (encrypted or not is the room's, asked when sending). Its
  files are not kept: the resumed turn reads them from the stored message.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
from mautrix.client import Client
from mautrix.errors import MatrixRequestError
from mautrix.types import EventID, RoomID

from luna.errors import MatrixError
from luna.frontends.channels.contract import ChannelError, InboundEvent, IncomingFile
from luna.frontends.channels.cursor import EventCodec
from luna.frontends.channels.following import Following
from luna.frontends.matrix.adapter import remember
from luna.frontends.matrix.conversation import Room, session_of
from luna.frontends.matrix.events import MatrixFile, RoomMessage
from luna.frontends.matrix.media import download, download_capped


def incoming_file(http: httpx.AsyncClient, token: str, file: MatrixFile, cap: int) -> IncomingFile:
    async def read() -> bytes:
        try:
            return await download(http, token, file, cap)
        except MatrixError as e:
            raise ChannelError(str(e)) from e

    async def read_capped(limit: int) -> bytes:
        try:
            return await download_capped(http, token, file, limit)
        except MatrixError as e:
            raise ChannelError(str(e)) from e

    return IncomingFile(file.name, file.declared_size or 0, file.declared_mime, read, file.kind,
                        read_capped)  # fmt: skip


def event_json(event: InboundEvent) -> dict[str, Any]:
    """What a restarted Luna needs of an event to answer it."""
    room: Room = event.conversation
    return {
        "event_id": event.message_id,
        "sender": event.author_id,
        "room_id": room.room_id,
        "thread_root": room.thread_root,
        "reply_to": room.reply_to,
        "session_id": event.session_id,
        "text": event.text,
        "is_private": event.is_private,
        "address": event.address,
    }


def event_from_json(data: dict[str, Any]) -> InboundEvent:
    def text_or_none(key: str) -> str | None:
        value = data.get(key)
        return str(value) if value else None

    return InboundEvent(
        message_id=str(data["event_id"]),
        author_id=str(data["sender"]),
        author_is_bot=False,
        conversation=Room(
            str(data["room_id"]), text_or_none("thread_root"), text_or_none("reply_to")
        ),
        session_id=str(data["session_id"]),
        text=str(data.get("text", "")),
        is_private=bool(data.get("is_private")),
        addressed=True,
        address=dict(data.get("address") or {}),
    )


CODEC = EventCodec(event_json, event_from_json)


class Inbound:
    """The translation of one bot account's room messages."""

    def __init__(
        self,
        client: Client,
        own_events: dict[str, None],
        following: Following,
        http: httpx.AsyncClient,
        cap: int,
    ) -> None:
        self.client = client
        self.own_events = own_events  # the adapter's: every event Luna sent
        self.following = following  # the threads Luna answers in, as their sessions
        self.http = http
        self.cap = cap
        self.direct: dict[str, bool] = {}

    async def is_own(self, room_id: str, event_id: str | None) -> bool:
        """Whether ``event_id`` is Luna's (remembered, else asked of the homeserver)."""
        if event_id is None:
            return False
        if event_id in self.own_events:
            return True
        try:
            event = await self.client.get_event(RoomID(room_id), EventID(event_id))
        except MatrixRequestError:
            return False
        if event.sender == self.client.mxid:
            remember(self.own_events, event_id)
            return True
        return False

    async def is_direct(self, room_id: str) -> bool:
        if room_id not in self.direct:
            members = await self.client.get_joined_members(RoomID(room_id))
            self.direct[room_id] = len(members) <= 2
        return self.direct[room_id]

    async def event_of(self, msg: RoomMessage) -> InboundEvent:
        bot = str(self.client.mxid)
        is_direct = await self.is_direct(msg.room_id)
        session_id = session_of(
            msg.room_id, msg.sender, thread_root=msg.thread_root, is_direct=is_direct
        )
        addressed = (
            is_direct
            or msg.mentions_bot
            or await self.is_own(msg.room_id, msg.reply_to)
            or (msg.thread_root is not None and (
                await self.following.follows(session_id)
                or await self.is_own(msg.room_id, msg.thread_root)
            ))
        )  # fmt: skip
        text = msg.text
        if msg.mentions_bot:
            text = re.sub(rf"{re.escape(bot)}:?", " ", text).strip()
        if msg.thread_root is not None:
            room = Room(msg.room_id, msg.thread_root)
        else:
            room = Room(msg.room_id, None, None if is_direct else msg.event_id)
        token = str(self.client.api.token)
        return InboundEvent(
            message_id=msg.event_id,
            author_id=msg.sender,
            author_is_bot=False,
            conversation=room,
            session_id=session_id,
            text=text,
            is_private=is_direct,
            addressed=addressed,
            address=room.address(msg.sender),
            files=tuple(incoming_file(self.http, token, f, self.cap) for f in msg.files),
        )
