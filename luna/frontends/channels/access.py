"""Who may talk to Luna in a chat app, with which rights and in which memory scope.

Job: :class:`Access` (one per app, built from its config section) maps an author to a
:class:`Speaker`, or None when Luna stays silent; :func:`is_heard` adds the group rule.

Invariants:
- Default deny: the owner and the allowed users are heard; anyone else only when
  ``strangers_can_chat``, and then without tools (no approver either).
- The owner is one person across apps: their id in any app has memory scope ``owner``.
  Everyone else keeps a scope of their own per app: ``user:`` + their user id, which is the
  app's id after the app's ``id_prefix`` (Discord's ``user:<id>``, kept as it always was;
  Telegram's ``user:telegram:<id>``; Matrix's ``user:<mxid>``, an id that names its
  server). The user id is what scheduled tasks are filed under.
- Bots (Luna herself included) are never heard.
- In a group Luna answers only when addressed (mentioned, replied to, in a thread she
  follows); a private chat is always addressed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

OWNER_SCOPE = "owner"


@dataclass(frozen=True)
class Speaker:
    user_id: str  # id_prefix + the app's id, as text ("123", "telegram:123")
    scope: str  # memory scope
    allow_tools: bool
    is_owner: bool


@dataclass(frozen=True)
class Access:
    """One app's admission rules."""

    owner_ids: frozenset[str]
    allowed_users: frozenset[str]
    strangers_can_chat: bool
    id_prefix: str  # "" (Discord), "telegram:" (Telegram)

    @classmethod
    def of(
        cls,
        owner_ids: Iterable[object],
        allowed_users: Iterable[object],
        *,
        strangers_can_chat: bool,
        id_prefix: str,
    ) -> Access:
        """From config values (ints or text; 0 and "" mean unset)."""
        owners = frozenset(str(i) for i in owner_ids if i not in (0, "", None))
        return cls(owners, frozenset(str(i) for i in allowed_users), strangers_can_chat, id_prefix)

    def speaker(self, author_id: str, *, is_bot: bool = False) -> Speaker | None:
        """The speaker ``author_id`` is, or None when Luna does not answer them."""
        if is_bot:
            return None
        is_owner = author_id in self.owner_ids
        if is_owner or author_id in self.allowed_users:
            allow_tools = True
        elif self.strangers_can_chat:
            allow_tools = False
        else:
            return None
        user_id = f"{self.id_prefix}{author_id}"
        scope = OWNER_SCOPE if is_owner else f"user:{user_id}"
        return Speaker(user_id, scope, allow_tools, is_owner)

    def is_owner(self, author_id: str) -> bool:
        return author_id in self.owner_ids


def is_heard(*, is_private: bool, addressed: bool) -> bool:
    """A group message starts a turn only when it addresses Luna."""
    return is_private or addressed
