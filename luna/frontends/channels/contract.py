"""The seam between the channel layer and one chat app: what an adapter is asked to do, and
the shape in which it hands over what its app sent.

Job: :class:`ChannelAdapter` is everything the layer calls on an app (send, edit, delete,
typing, post an approval prompt, find where a scheduled result goes, download a file);
:class:`InboundEvent` is one message from the app, already translated; the errors are the
only app failures the layer branches on.

Invariants:
- An adapter translates, it decides nothing: who may talk, which messages start a turn, what
  a burst is, how a reply is streamed, split, retried and approved belong to the layer.
- An adapter's calls raise only :class:`ChannelError` subclasses (its app's exceptions are
  translated once, where the adapter owns them, with ``raise … from``) or CancelledError;
  every network call has its own timeout.
- Text given to ``send``/``edit`` is the model's Markdown (at most ``limit`` characters); the
  adapter renders it for its app, so that no text can break a message.
- Ids are text (``str``): every app's ids fit, and they are stored as they are.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from luna.errors import LunaError
from luna.messages import Frontend


class ChannelError(LunaError):
    """A chat app refused or failed a call (already logged by nobody: the layer logs it)."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class RateLimitedError(ChannelError):
    """The app asked to wait ``retry_after`` seconds before the next call (HTTP 429)."""

    def __init__(self, retry_after: float, message: str = "rate limited") -> None:
        super().__init__(f"{message} (retry after {retry_after:g}s)", status=429)
        self.retry_after = max(0.0, retry_after)


class MessageGoneError(ChannelError):
    """The message to edit or delete no longer exists (deleted, or too old to edit)."""


class TooLongError(ChannelError):
    """The app found the text too long for one message (its own count of characters)."""


class UnreachableError(ChannelError):
    """Nobody can be written to there: the bot was blocked, kicked, or the chat is gone."""


@dataclass(frozen=True)
class IncomingFile:
    """A file that came with a message, not yet downloaded: the layer hands it to the
    attachments intake (:mod:`~luna.frontends.channels.files`), which reads it only within
    its caps.

    ``read_capped(limit)`` downloads at most ``limit + 1`` bytes (more than ``limit`` means the
    file is bigger; the rest is never fetched). An adapter whose app can stream a download
    gives it; without it the layer calls ``read`` only when the announced ``size`` fits, and
    a file that announced none is read whole before it is judged. Both raise ChannelError
    (or TimeoutError) and nothing else.
    """

    name: str
    size: int  # bytes, as the app announced them (0 when it did not say)
    declared_mime: str | None
    read: Callable[[], Awaitable[bytes]]  # downloads it whole
    kind: str = "document"  # "photo", "voice", "document": what the app called it
    read_capped: Callable[[int], Awaitable[bytes]] | None = None


@dataclass(frozen=True)
class Sent:
    """A message the adapter sent: enough for it to edit or delete that message later."""

    conversation: Any  # the adapter's own handle of the place (a channel, a chat id and topic)
    message_id: str
    native: Any = None  # the app's own message object, when the adapter keeps one


@dataclass(frozen=True)
class InboundEvent:
    """One app message after translation; the layer decides what becomes of it."""

    message_id: str  # unique within the app: the replay and duplicate check's key
    author_id: str  # the app's user id
    author_is_bot: bool
    conversation: Any  # where the answer goes (the adapter's handle)
    session_id: str  # the adapter's stable name for the conversation's session
    text: str  # with any mention of the bot already removed
    is_private: bool  # a one-to-one chat with the bot
    addressed: bool  # in a group: mentioned, replied to, or in a thread Luna follows
    address: dict[str, Any] = field(default_factory=dict)  # for scheduled results (ids as text)
    files: tuple[IncomingFile, ...] = ()


@dataclass(frozen=True)
class ApprovalRequest:
    """What the owner is asked: the tool, its arguments shown short and in full."""

    tool: str
    preview: str  # JSON, cut to a preview
    full: str  # every argument (``approval_text``); shown when ``is_cut``
    is_cut: bool
    owner_ids: tuple[str, ...]  # the owner's ids in this app, for a mention
    timeout: float


@dataclass(frozen=True)
class Destination:
    """Where a scheduled result is sent, and a note to put before it (a fallback place)."""

    conversation: Any
    note: str = ""


class ChannelAdapter(Protocol):
    """What the layer calls on a chat app. One adapter object per running app."""

    name: Frontend  # the front-end's name ("discord", "telegram"): InboundMessage.frontend
    limit: int  # characters per message
    edit_interval: float  # seconds between two edits of a streamed reply
    typing_every: float  # seconds one typing indicator lasts (0: the app has none)
    status_prefix: str  # put before a status line ("-# " on Discord: small text)

    async def send(self, conversation: Any, text: str) -> Sent: ...

    async def edit(self, sent: Sent, text: str) -> Sent: ...

    async def delete(self, sent: Sent) -> None: ...

    async def typing(self, conversation: Any) -> None: ...

    async def post_approval(self, conversation: Any, request: ApprovalRequest) -> Sent:
        """Post the prompt; the adapter hands every answer to it that it sees (a button
        press, a reaction) to :meth:`luna.frontends.channels.approval.Approvals.answer`."""
        ...

    async def offer_choices(self, prompt: Sent) -> None:
        """Add the answers to a posted prompt where the app needs a second call (Discord's
        reactions); a no-op where they came with it (Telegram's inline keyboard)."""
        ...

    async def destination(self, address: dict[str, Any]) -> Destination | None:
        """Where a result for ``address`` goes now; None when nowhere (tried again later).
        Raises ChannelError when the app cannot be asked right now."""
        ...
