"""Where a scheduled result goes on Discord: the DM, thread or channel it was asked in.

Job: :func:`address_of` is the reply address a turn carries (``InboundMessage.address``), so
a task scheduled in it remembers where it came from; :func:`destination` finds that place
again for the channel layer's delivery (``luna.frontends.channels.delivery``).

Invariants:
- A DM is sent through the user's DM channel, opened when the bot has none (after a restart
  it never has one); a thread or channel is looked up, fetched when not cached.
- When the channel is gone or closed to the bot (not found, forbidden), the result goes to
  the person's DM instead, with ``MOVED_NOTE`` before it, so it is not lost.
- A Discord failure that may pass raises ``ChannelError`` (the router tries again later);
  a place that cannot be found is None.
"""

from __future__ import annotations

import logging
from typing import Any

import discord

from luna.frontends.channels.contract import Destination, MessageGoneError, UnreachableError
from luna.frontends.discord.calls import call

log = logging.getLogger(__name__)

MOVED_NOTE = "-# (sent here: the channel it was asked in is gone or closed to me)\n"


def address_of(channel: Any, user_id: str, is_dm: bool) -> dict[str, Any]:
    """Where a later answer to this turn goes (ids as text)."""
    return {"channel_id": str(channel.id), "user_id": str(user_id), "is_dm": bool(is_dm)}


async def _dm(client: discord.Client, user_id: int) -> discord.abc.Messageable | None:
    user = client.get_user(user_id)
    try:
        if user is None:
            user = await call(client.fetch_user(user_id))
        if user.dm_channel is not None:
            return user.dm_channel
        return await call(user.create_dm())
    except (MessageGoneError, UnreachableError):
        return None


async def _channel(client: discord.Client, channel_id: int) -> discord.abc.Messageable | None:
    channel = client.get_channel(channel_id)
    if isinstance(channel, discord.abc.Messageable):  # cached (a category takes no messages)
        return channel
    try:
        fetched = await call(client.fetch_channel(channel_id))
        return fetched if isinstance(fetched, discord.abc.Messageable) else None
    except (MessageGoneError, UnreachableError):
        return None


async def destination(client: discord.Client, address: dict[str, Any]) -> Destination | None:
    """Where ``address`` is now (see the module invariants)."""
    try:
        user_id = int(address.get("user_id") or 0)
        channel_id = int(address.get("channel_id") or 0)
    except (TypeError, ValueError):
        log.warning("discord: a scheduled delivery has a bad address %r", address)
        return None
    if address.get("is_dm") or not channel_id:
        dm = await _dm(client, user_id) if user_id else None
        return Destination(dm) if dm is not None else None
    channel = await _channel(client, channel_id)
    if channel is not None:
        return Destination(channel)
    if not user_id:
        return None
    dm = await _dm(client, user_id)  # the place is gone or closed: tell the person
    return Destination(dm, MOVED_NOTE) if dm is not None else None
