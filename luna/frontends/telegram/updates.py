"""Telegram updates in the channel layer's terms: a message becomes an ``InboundEvent``.

Job: :func:`event_of` translates one ``telegram.Message`` (text or caption, photos,
documents, voice notes) for :meth:`Channel.receive`; :func:`event_json` and
:func:`event_from_json` (:data:`CODEC`) keep an event in the channel ledger for a turn a
restart must finish.

Invariants:
- The event's id is the update's ``update_id`` (what the offset acknowledges); replays of
  one update are one event.
- In a group Luna is addressed by an ``@username`` mention of her, a ``text_mention`` of her
  id, or a reply to one of her messages (not a topic's opening message); the mention is
  removed from the text. Groups outside ``telegram.allowed_chats`` (when set) are never heard.
- Files are described, not downloaded: each is read only when the layer asks (``getFile``,
  then the file URL, streamed no further than the layer's cap; a local Bot API server in
  ``--local`` mode gives an absolute path instead, read from disk no further than the cap).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from telegram import Bot, Message, MessageEntity

from luna.frontends.channels.contract import ChannelError, InboundEvent, IncomingFile
from luna.frontends.channels.cursor import EventCodec
from luna.frontends.channels.download import Downloads, fetch_capped, read_local_capped
from luna.frontends.telegram.calls import call
from luna.frontends.telegram.conversation import Chat, session_of

ID_PREFIX = "telegram:"


def _is_addressed(message: Message, bot_id: int, username: str) -> bool:
    text = message.text or message.caption or ""
    entities = message.entities or message.caption_entities or ()
    for entity in entities:
        if entity.type == MessageEntity.MENTION:
            mention = text.encode("utf-16-le")[
                entity.offset * 2 : (entity.offset + entity.length) * 2
            ]
            if mention.decode("utf-16-le").lower() == f"@{username}".lower():
                return True
        if entity.type == MessageEntity.TEXT_MENTION and entity.user and entity.user.id == bot_id:
            return True
    replied = message.reply_to_message
    return bool(
        replied is not None
        and replied.from_user is not None
        and replied.from_user.id == bot_id
        and replied.forum_topic_created is None
    )


def _strip_mention(text: str, username: str) -> str:
    return re.sub(rf"@{re.escape(username)}\b", " ", text, flags=re.IGNORECASE).strip()


def _files(bot: Bot, downloads: Downloads, message: Message) -> tuple[IncomingFile, ...]:
    found: list[tuple[str, str, int, str | None, str]] = []  # id, name, size, mime, kind
    if message.photo:
        largest = message.photo[-1]
        found.append((largest.file_id, "photo.jpg", largest.file_size or 0, "image/jpeg", "photo"))
    if message.document:
        d = message.document
        found.append((d.file_id, d.file_name or "document", d.file_size or 0, d.mime_type,
                      "document"))  # fmt: skip
    if message.voice:
        v = message.voice
        found.append((v.file_id, "voice.ogg", v.file_size or 0, v.mime_type, "voice"))
    if message.audio:
        a = message.audio
        found.append((a.file_id, a.file_name or "audio", a.file_size or 0, a.mime_type,
                      "document"))  # fmt: skip

    def incoming(file_id: str, name: str, size: int, mime: str | None, kind: str) -> IncomingFile:
        async def read() -> bytes:
            file = await call(bot.get_file(file_id))
            return bytes(await call(file.download_as_bytearray()))

        async def read_capped(limit: int) -> bytes:
            file = await call(bot.get_file(file_id))
            where = file.file_path
            if not where:
                raise ChannelError("Telegram gave no file path")
            if urlsplit(where).scheme in ("http", "https"):
                return await fetch_capped(await downloads.client(), where, limit)
            return await read_local_capped(Path(where), limit)  # a local Bot API server

        return IncomingFile(name, size, mime, read, kind, read_capped)

    return tuple(incoming(*found_file) for found_file in found)


def event_of(
    bot: Bot, downloads: Downloads, update_id: int, message: Message, allowed_chats: Sequence[int]
) -> InboundEvent | None:
    """The event for ``message`` (None for what Luna never reads: service messages, other
    bots' channels, groups outside ``allowed_chats``); its files are fetched with
    ``downloads``' client."""
    author = message.from_user
    if author is None:
        return None
    is_private = message.chat.type == "private"
    if not is_private and allowed_chats and message.chat.id not in allowed_chats:
        return None
    me = bot.bot
    username = me.username or ""
    thread = message.message_thread_id if message.is_topic_message else None
    chat = Chat(message.chat.id, thread)
    addressed = is_private or _is_addressed(message, me.id, username)
    text = message.text or message.caption or ""
    if addressed and not is_private:
        text = _strip_mention(text, username)
    return InboundEvent(
        message_id=str(update_id),
        author_id=str(author.id),
        author_is_bot=author.is_bot,
        conversation=chat,
        session_id=session_of(chat, is_private=is_private, author_id=author.id),
        text=text.strip(),
        is_private=is_private,
        addressed=addressed,
        address=chat.address(f"{ID_PREFIX}{author.id}"),
        files=_files(bot, downloads, message),
    )


def event_json(event: InboundEvent) -> dict[str, Any]:
    """What a restarted Luna needs of an event to answer it (its files were stored with the
    turn's message: the resumed turn reads them from there)."""
    chat: Chat = event.conversation
    return {
        "update_id": event.message_id,
        "author_id": event.author_id,
        "chat_id": chat.chat_id,
        "thread_id": chat.thread_id,
        "session_id": event.session_id,
        "text": event.text,
        "is_private": event.is_private,
        "address": event.address,
    }


def event_from_json(data: dict[str, Any]) -> InboundEvent:
    return InboundEvent(
        message_id=str(data["update_id"]),
        author_id=str(data["author_id"]),
        author_is_bot=False,
        conversation=Chat(int(data["chat_id"]), data.get("thread_id")),
        session_id=str(data["session_id"]),
        text=str(data.get("text", "")),
        is_private=bool(data.get("is_private")),
        addressed=True,
        address=dict(data.get("address") or {}),
    )


CODEC = EventCodec(event_json, event_from_json)
