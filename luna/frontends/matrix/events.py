"""Matrix room events (already decrypted) as the facts Luna needs: a pure translation.

Job: :func:`parse` turns one timeline event's JSON into a :class:`RoomMessage` (text, files,
mention, reply, thread) or a :class:`Reaction`, or None for everything Luna ignores (edits,
redactions, state, its own events, unknown types).

Invariants:
- Wire data enters here as plain dicts and leaves as frozen dataclasses; nothing else of the
  Matrix front-end reads event JSON.
- A reply's quoted fallback (the ``> <@user> …`` lines before the answer) is removed, so
  the model reads what the person wrote, not a copy of the message they answered.
- ``mentions_bot``: the event's ``m.mentions`` lists the bot, or (clients without intentional
  mentions) its body names the bot's full user id or its HTML links to it.
- A thread message's ``reply_to`` is None when it only falls back to the thread root
  (``is_falling_back``): replying in a thread is not replying to the bot.
- Files: ``m.image``/``m.file``/``m.audio``/``m.video`` carry an ``mxc://`` URL, plain
  (``url``) or encrypted (``file``, with its key, IV and hash); the declared size and MIME
  type are the sender's claims, never trusted further than display.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

FILE_TYPES = ("m.image", "m.file", "m.audio", "m.video")
TEXT_TYPES = ("m.text", "m.notice", "m.emote")


@dataclass(frozen=True)
class MatrixFile:
    name: str
    url: str  # mxc://server/media_id
    declared_size: int | None
    declared_mime: str | None
    encryption: dict[str, Any] | None  # the EncryptedFile JSON (key, iv, hashes), or None


@dataclass(frozen=True)
class RoomMessage:
    room_id: str
    event_id: str
    sender: str
    text: str
    mentions_bot: bool
    reply_to: str | None
    thread_root: str | None
    files: tuple[MatrixFile, ...]
    timestamp_ms: int


@dataclass(frozen=True)
class Reaction:
    room_id: str
    event_id: str
    sender: str
    target: str
    key: str


def _strip_reply_fallback(body: str) -> str:
    lines = body.split("\n")
    if not lines or not lines[0].startswith("> "):
        return body
    i = 0
    while i < len(lines) and lines[i].startswith(">"):
        i += 1
    return "\n".join(lines[i:]).lstrip("\n")


def _mentions(content: dict[str, Any], bot_id: str) -> bool:
    mentions = content.get("m.mentions")
    if isinstance(mentions, dict):
        users = mentions.get("user_ids")
        return isinstance(users, list) and bot_id in users
    body = str(content.get("body") or "")
    html = str(content.get("formatted_body") or "")
    return bot_id in body or f"matrix.to/#/{bot_id}" in html


def _file(content: dict[str, Any]) -> MatrixFile | None:
    raw_info = content.get("info")
    info: dict[str, Any] = raw_info if isinstance(raw_info, dict) else {}
    encrypted = content.get("file") if isinstance(content.get("file"), dict) else None
    url = (encrypted or {}).get("url") if encrypted else content.get("url")
    if not isinstance(url, str) or not url.startswith("mxc://"):
        return None
    name = content.get("filename") or content.get("body") or "file"
    size = info.get("size")
    mime = info.get("mimetype")
    return MatrixFile(
        name=str(name),
        url=url,
        declared_size=size if isinstance(size, int) else None,
        declared_mime=mime if isinstance(mime, str) else None,
        encryption=encrypted,
    )


def _relations(content: dict[str, Any]) -> tuple[str | None, str | None, str | None]:
    """(rel_type, thread root, replied-to event) of a message's ``m.relates_to``."""
    rel = content.get("m.relates_to")
    if not isinstance(rel, dict):
        return None, None, None
    rel_type = rel.get("rel_type")
    in_reply = rel.get("m.in_reply_to")
    reply_to = in_reply.get("event_id") if isinstance(in_reply, dict) else None
    if rel_type == "m.thread":
        if rel.get("is_falling_back") is True:
            reply_to = None
        return "m.thread", rel.get("event_id"), reply_to
    return rel_type, None, reply_to


def parse(event: dict[str, Any], bot_id: str) -> RoomMessage | Reaction | None:
    """The facts of one decrypted timeline event, or None when Luna ignores it."""
    sender, event_id = event.get("sender"), event.get("event_id")
    content = event.get("content")
    if not isinstance(sender, str) or not isinstance(event_id, str) or sender == bot_id:
        return None
    if not isinstance(content, dict) or "state_key" in event:
        return None
    room_id = str(event.get("room_id") or "")
    if event.get("type") == "m.reaction":
        rel = content.get("m.relates_to")
        if isinstance(rel, dict) and rel.get("rel_type") == "m.annotation":
            target, key = rel.get("event_id"), rel.get("key")
            if isinstance(target, str) and isinstance(key, str):
                return Reaction(room_id, event_id, sender, target, key)
        return None
    if event.get("type") != "m.room.message":
        return None
    rel_type, thread_root, reply_to = _relations(content)
    if rel_type == "m.replace":
        return None  # an edit of an earlier message: that one was answered already
    msgtype = content.get("msgtype")
    files: tuple[MatrixFile, ...] = ()
    if msgtype in FILE_TYPES:
        found = _file(content)
        files = (found,) if found else ()
        text = ""
    elif msgtype in TEXT_TYPES:
        text = str(content.get("body") or "")
        if reply_to:
            text = _strip_reply_fallback(text)
    else:
        return None
    return RoomMessage(
        room_id=room_id,
        event_id=event_id,
        sender=sender,
        text=text.strip(),
        mentions_bot=_mentions(content, bot_id),
        reply_to=reply_to if isinstance(reply_to, str) else None,
        thread_root=thread_root if isinstance(thread_root, str) else None,
        files=files,
        timestamp_ms=int(event.get("origin_server_ts") or 0),
    )
