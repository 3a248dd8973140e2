"""Matrix as a channel adapter: the layer's calls as room events, answers read back.

Job: :class:`MatrixAdapter` keeps the
:class:`~luna.frontends.channels.contract.ChannelAdapter` contract over the
:class:`~luna.frontends.matrix.outbox.Outbox`: a conversation is a
:class:`~luna.frontends.matrix.conversation.Room`; a message is sent as Markdown with its
sanitized HTML (``render``), edited with ``m.replace``, deleted by redaction.
:func:`verdict` reads an owner's answer to an approval prompt (a reaction or a reply).

Invariants:
- A text whose event would be too large (``render.MAX_PART_BYTES`` of Markdown and HTML)
  raises ``TooLongError`` before any request (the layer halves it); the layer splits replies
  at ``MATRIX_LIMIT`` characters first.
- An edit keeps the original's id (an ``m.replace`` always names the first event) and is not
  sent when the message already shows that text.
- Every event Luna sends is remembered (``own_events``, bounded): a reply to one of them, or
  a thread under one, addresses her.
- An approval prompt (an ``m.notice``, mentioning the owner) gets ✅ and ❌ reactions to click;
  a cut preview is followed by the whole text as a file (encrypted in an encrypted room).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from mautrix.client import Client
from mautrix.crypto.attachments import encrypt_attachment
from mautrix.errors import MatrixRequestError
from mautrix.types import RoomCreatePreset, RoomID, UserID

from luna.frontends.channels.contract import (
    ApprovalRequest,
    ChannelError,
    Destination,
    Sent,
    TooLongError,
)
from luna.frontends.matrix import render
from luna.frontends.matrix.conversation import Room
from luna.frontends.matrix.outbox import Outbox
from luna.messages import Frontend
from luna.observe import log_event

MATRIX_LIMIT = 8_000  # characters per message (the event's byte budget: ``render``)
TYPING_EVERY = 8.0  # the typing notice lasts 10 s (``outbox.TYPING_TIMEOUT_MS``)
APPROVE, DENY = "✅", "❌"
ALLOW_KEYS = frozenset({APPROVE, "👍", "👍️"})
DENY_KEYS = frozenset({DENY, "👎", "👎️"})
ALLOW_WORDS = frozenset({"yes", "y", "ok", "allow"})
DENY_WORDS = frozenset({"no", "n", "deny"})
MAX_KNOWN = 4096


def verdict(answer: str) -> bool | None:
    """True (allow), False (deny) or None (not an answer) for a reaction key or reply text."""
    key = answer.strip()
    word = key.lower().rstrip(".!")
    if key in ALLOW_KEYS or word in ALLOW_WORDS:
        return True
    if key in DENY_KEYS or word in DENY_WORDS:
        return False
    return None


@dataclass(frozen=True)
class Shown:
    """What a sent message shows (``Sent.native``): its Markdown and message type."""

    markdown: str
    msgtype: str = "m.text"


def remember(known: dict[str, None], key: str) -> None:
    known[key] = None
    while len(known) > MAX_KNOWN:
        known.pop(next(iter(known)))


class MatrixAdapter:
    """The channel layer's calls on Matrix."""

    name: Frontend = "matrix"
    limit = MATRIX_LIMIT
    typing_every = TYPING_EVERY
    status_prefix = ""

    def __init__(self, client: Client, outbox: Outbox, *, edit_interval: float) -> None:
        self.client = client
        self.outbox = outbox
        self.edit_interval = edit_interval
        self.own_events: dict[str, None] = {}

    async def _post(
        self, room: Room, content: dict[str, Any], etype: str = "m.room.message"
    ) -> str:
        event_id = await self.outbox.send(room.room_id, etype, content)
        remember(self.own_events, event_id)
        return event_id

    async def send(self, conversation: Any, text: str) -> Sent:
        room: Room = conversation
        _check_size(text)
        content = render.message(text, thread_root=room.thread_root, reply_to=room.reply_to)
        return Sent(room, await self._post(room, content), Shown(text))

    async def edit(self, sent: Sent, text: str) -> Sent:
        shown: Shown = sent.native if isinstance(sent.native, Shown) else Shown("")
        if text == shown.markdown:
            return sent
        _check_size(text)
        await self._post(sent.conversation, render.edit(sent.message_id, text,
                                                        msgtype=shown.msgtype))  # fmt: skip
        return Sent(sent.conversation, sent.message_id, Shown(text, shown.msgtype))

    async def delete(self, sent: Sent) -> None:
        room: Room = sent.conversation
        await self.outbox.redact(room.room_id, sent.message_id)

    async def typing(self, conversation: Any) -> None:
        room: Room = conversation
        await self.outbox.typing(room.room_id, True)

    async def stop_typing(self, conversation: Any) -> None:
        """The turn is answered: take the typing notice down now, not at its timeout."""
        room: Room = conversation
        await self.outbox.typing(room.room_id, False)

    async def post_approval(self, conversation: Any, request: ApprovalRequest) -> Sent:
        room: Room = conversation
        owner = request.owner_ids[0]
        text = (
            f"🔐 [{owner}](https://matrix.to/#/{owner}) may I run `{request.tool}`?\n"
            f"```json\n{request.preview}\n```\n"
            + ("The whole text follows as a file.\n" if request.is_cut else "")
            + f"React {APPROVE} to allow or {DENY} to deny, or reply yes/no "
            f"(denied after {request.timeout:g}s)."
        )
        _check_size(text)
        content = render.notice(text, thread_root=room.thread_root, reply_to=room.reply_to)
        content["m.mentions"] = {"user_ids": [owner]}
        prompt = Sent(room, await self._post(room, content), Shown(text, "m.notice"))
        if request.is_cut:
            await self._send_file(room, request.full.encode(), f"{request.tool}.txt")
        return prompt

    async def _send_file(self, room: Room, data: bytes, name: str) -> None:
        encrypted = self.client.crypto is not None and await self.outbox.is_encrypted(room.room_id)
        content: dict[str, Any] = {
            "msgtype": "m.file", "body": name, "filename": name,
            "info": {"mimetype": "text/plain", "size": len(data)},
        }  # fmt: skip
        try:
            if encrypted:
                ciphertext, info = await asyncio.to_thread(encrypt_attachment, data)
                mxc = await self.client.upload_media(ciphertext, "application/octet-stream")
                content["file"] = info.serialize() | {"url": str(mxc)}
            else:
                content["url"] = str(await self.client.upload_media(data, "text/plain", name))
        except MatrixRequestError as e:
            raise ChannelError(f"uploading {name} failed: {e.errcode}") from e
        if room.thread_root:
            content["m.relates_to"] = render.message("", thread_root=room.thread_root)[
                "m.relates_to"
            ]
        await self._post(room, content)

    async def offer_choices(self, prompt: Sent) -> None:
        for key in (APPROVE, DENY):
            await self._post(prompt.conversation, render.reaction(prompt.message_id, key),
                             "m.reaction")  # fmt: skip

    async def destination(self, address: dict[str, Any]) -> Destination | None:
        room = Room.from_address(address)
        if room is not None:
            return Destination(room)
        user = str(address.get("user_id") or "")
        if not (address.get("is_dm") and user.startswith("@")):
            return None
        return Destination(Room(await self.direct_room(user)))

    async def direct_room(self, user_id: str) -> str:
        """The room Luna shares with ``user_id`` alone, created (encrypted) when none is; a
        new room's key goes to the invited person's devices at once (not yet a member, they
        would otherwise miss it and could not read what is sent before they join)."""
        client = self.client
        try:
            for room_id in await client.get_joined_rooms():
                members = await client.get_joined_members(room_id)
                if set(members) == {client.mxid, UserID(user_id)}:
                    return str(room_id)
            room = await client.create_room(
                invitees=[UserID(user_id)],
                is_direct=True,
                preset=RoomCreatePreset.TRUSTED_PRIVATE,
                initial_state=[{"type": "m.room.encryption", "state_key": "",
                                "content": {"algorithm": "m.megolm.v1.aes-sha2"}}],
            )  # fmt: skip
            if client.crypto is not None:
                await client.crypto.share_group_session(room, [client.mxid, UserID(user_id)])
        except MatrixRequestError as e:
            raise ChannelError(f"cannot find a direct room with {user_id}: {e.errcode}") from e
        log_event("matrix_direct_room", room=str(room), user=user_id)
        return str(RoomID(room))


def _check_size(text: str) -> None:
    size = render.size(text)
    if size > render.MAX_PART_BYTES:
        raise TooLongError(f"{size} bytes of Markdown and HTML > {render.MAX_PART_BYTES}")
