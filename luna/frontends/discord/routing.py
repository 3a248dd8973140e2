"""Who Luna answers on Discord, in which session, with which rights: a pure decision.

Job: :func:`decide` maps the facts of one incoming message (a :class:`MessageFacts`, built
from a ``discord.Message`` by the bot) to a :class:`Route`, or None when Luna stays silent.

Invariants:
- Bots (including Luna herself) are never answered.
- Guild and channel allowlists apply when non-empty (a thread counts as its parent channel);
  DMs have no guild or channel to check.
- Who may talk is the channel layer's rule (:func:`access_of` builds it from
  ``[discord]``): the owner and ``allowed_users`` get tools, strangers chat without tools when
  ``strangers_can_chat``; nobody but the owner has scope ``owner``, everyone else
  ``user:<id>``.
- Luna answers DMs, mentions, and messages in threads she created or was mentioned in.
  A mention in a plain channel opens a thread when ``reply_in_threads`` is on.
- Session ids: ``thread-{thread_id}``, ``dm-{user_id}``, ``ch-{channel_id}-{user_id}``
  (a thread about to be opened gets its id from the bot once Discord created it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from luna.config import DiscordConfig
from luna.frontends.channels.access import Access


@dataclass(frozen=True)
class MessageFacts:
    """What routing needs to know about one message (no discord.py objects)."""

    author_id: int
    author_is_bot: bool
    bot_id: int
    content: str
    is_dm: bool
    guild_id: int | None
    channel_id: int  # the channel the message is in (a thread id for threads)
    thread_parent_id: int | None  # set when the message is in a thread
    mentions_bot: bool
    known_thread: bool  # a thread Luna created or was mentioned in before


@dataclass(frozen=True)
class Route:
    session_id: str  # "" when open_thread is True: the bot fills it in after creating it
    user_id: str
    scope: str
    allow_tools: bool
    text: str
    open_thread: bool = False
    remember_thread: bool = False  # mentioned in a thread: answer follow-ups without mention


def strip_mention(content: str, bot_id: int) -> str:
    """Remove ``<@id>`` / ``<@!id>`` mentions of the bot and tidy the whitespace around them."""
    text = re.sub(rf"<@!?{bot_id}>", " ", content)
    return re.sub(r"[ \t]{2,}", " ", text).strip()


def access_of(cfg: DiscordConfig) -> Access:
    """The channel layer's admission rules with Discord's settings."""
    return Access.of(
        [cfg.owner_id],
        cfg.allowed_users,
        strangers_can_chat=cfg.strangers_can_chat,
        id_prefix="",
    )


def decide(f: MessageFacts, cfg: DiscordConfig) -> Route | None:
    """The route for one message, or None to ignore it (see module invariants)."""
    if f.author_is_bot or f.author_id == f.bot_id:
        return None
    if not f.is_dm:
        if cfg.allowed_guilds and f.guild_id not in cfg.allowed_guilds:
            return None
        channel = f.thread_parent_id if f.thread_parent_id is not None else f.channel_id
        if cfg.allowed_channels and not (
            channel in cfg.allowed_channels or f.channel_id in cfg.allowed_channels
        ):
            return None
    speaker = access_of(cfg).speaker(str(f.author_id))
    if speaker is None:
        return None
    scope, allow_tools, user_id = speaker.scope, speaker.allow_tools, speaker.user_id
    text = strip_mention(f.content, f.bot_id) if f.mentions_bot else f.content.strip()

    def route(session_id: str, **extra: bool) -> Route:
        return Route(session_id, user_id, scope, allow_tools, text, **extra)

    if f.is_dm:
        return route(f"dm-{f.author_id}")
    if f.thread_parent_id is not None:
        if f.known_thread:
            return route(f"thread-{f.channel_id}")
        if f.mentions_bot:
            return route(f"thread-{f.channel_id}", remember_thread=True)
        return None
    if not f.mentions_bot:
        return None
    if cfg.reply_in_threads:
        return route("", open_thread=True)
    return route(f"ch-{f.channel_id}-{f.author_id}")
