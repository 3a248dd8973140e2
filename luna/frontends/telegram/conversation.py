"""Where a Telegram reply goes, and how the places are named.

Invariants:
- A conversation is a chat and, in a forum, its topic (``message_thread_id``).
- Session ids: a private chat ``tg-<chat>``; a forum topic ``tg-<chat>-t<topic>`` (its own
  session, shared like a Discord thread); anywhere else in a group ``tg-<chat>-u<user>`` (one
  per person, so people with different memory scopes never share a history).
- A scheduled result's address is ``{"chat_id", "thread_id"?, "user_id"}`` (text).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Chat:
    chat_id: int
    thread_id: int | None = None

    def address(self, user_id: str) -> dict[str, Any]:
        out: dict[str, Any] = {"chat_id": str(self.chat_id), "user_id": user_id}
        if self.thread_id is not None:
            out["thread_id"] = str(self.thread_id)
        return out

    @classmethod
    def from_address(cls, address: dict[str, Any]) -> Chat | None:
        try:
            chat = int(str(address.get("chat_id", "")))
            thread = address.get("thread_id")
            return cls(chat, int(str(thread)) if thread not in (None, "") else None)
        except ValueError:
            return None


def session_of(chat: Chat, *, is_private: bool, author_id: int) -> str:
    if is_private:
        return f"tg-{chat.chat_id}"
    if chat.thread_id is not None:
        return f"tg-{chat.chat_id}-t{chat.thread_id}"
    return f"tg-{chat.chat_id}-u{author_id}"
