"""Where a Matrix reply goes, and how Luna's Matrix sessions and addresses are named.

Invariants:
- A conversation is a room, and within it a thread (``m.thread``, its root event) or an event
  answered as a reply (in a bigger room, so that who is answered is clear); a direct room is
  answered plainly.
- Session ids: a thread ``mx-thread-<root event>`` (its own session, shared like a Discord
  thread); a direct room ``mx-dm-<room>``; anywhere else in a bigger room
  ``mx-room-<room>-<mxid>`` (one per person: different memory scopes never share a history).
- A scheduled result's address is ``{"room_id", "thread_root"?, "user_id"}`` (text); the
  owner's default address (no room named) is ``{"user_id": <owner>, "is_dm": true}``, found
  again as the owner's direct room.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Room:
    room_id: str
    thread_root: str | None = None
    reply_to: str | None = None  # the event a new message answers (rooms, threads)

    def address(self, user_id: str) -> dict[str, Any]:
        out: dict[str, Any] = {"room_id": self.room_id, "user_id": user_id}
        if self.thread_root is not None:
            out["thread_root"] = self.thread_root
        return out

    @classmethod
    def from_address(cls, address: dict[str, Any]) -> Room | None:
        """The place a scheduled result goes: the room (and thread), answering no event."""
        room = str(address.get("room_id") or "")
        if not room.startswith("!"):
            return None
        root = address.get("thread_root")
        return cls(room, str(root) if isinstance(root, str) and root else None)


def session_of(room_id: str, sender: str, *, thread_root: str | None, is_direct: bool) -> str:
    if thread_root is not None:
        return f"mx-thread-{thread_root}"
    if is_direct:
        return f"mx-dm-{room_id}"
    return f"mx-room-{room_id}-{sender}"
