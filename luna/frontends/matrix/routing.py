"""Who Luna answers on Matrix, in which session, with which rights: a pure decision.

Job: :func:`decide` maps one :class:`~luna.frontends.matrix.events.RoomMessage` and the facts
about its room to a :class:`Route`, or None when Luna stays silent; :func:`may_invite` says
whose invites are accepted.

Invariants:
- Only the owner and ``allowed_users`` are answered (both with tools); the owner alone has
  scope ``owner``, everyone else ``user:<mxid>``. Nobody else's invite is accepted.
- In a direct room (the bot and one other member) every message is answered. In a bigger
  room Luna answers when she is mentioned, when the message replies to one of hers, or in a
  thread she already takes part in.
- A thread (``m.thread``) is a session of its own: ``mx-thread-<root event id>``; a direct
  room is ``mx-dm-<room id>``; a bigger room is one session per person,
  ``mx-room-<room id>-<mxid>``.
"""

from __future__ import annotations

from dataclasses import dataclass

from luna.config import MatrixConfig
from luna.frontends.matrix.events import RoomMessage


@dataclass(frozen=True)
class RoomFacts:
    is_direct: bool
    replies_to_bot: bool  # the message replies to one of Luna's events
    known_thread: bool  # the message's thread is one Luna answers in


@dataclass(frozen=True)
class Route:
    session_id: str
    user_id: str
    scope: str
    thread_root: str | None  # where the answer goes: this thread, or
    reply_to: str | None  # as a reply to this event (rooms), or plainly (direct rooms)


def may_invite(inviter: str, cfg: MatrixConfig) -> bool:
    return bool(inviter) and (inviter == cfg.owner or inviter in cfg.allowed_users)


def decide(msg: RoomMessage, room: RoomFacts, cfg: MatrixConfig) -> Route | None:
    """The route for one message, or None to ignore it (see module invariants)."""
    is_owner = bool(cfg.owner) and msg.sender == cfg.owner
    if not (is_owner or msg.sender in cfg.allowed_users):
        return None
    scope = "owner" if is_owner else f"user:{msg.sender}"
    if msg.thread_root is not None:
        if not (room.is_direct or msg.mentions_bot or room.replies_to_bot or room.known_thread):
            return None
        return Route(f"mx-thread-{msg.thread_root}", msg.sender, scope, msg.thread_root, None)
    if room.is_direct:
        return Route(f"mx-dm-{msg.room_id}", msg.sender, scope, None, None)
    if not (msg.mentions_bot or room.replies_to_bot):
        return None
    session = f"mx-room-{msg.room_id}-{msg.sender}"
    return Route(session, msg.sender, scope, None, msg.event_id)
