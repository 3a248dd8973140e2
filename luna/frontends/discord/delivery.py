"""Scheduled results on Discord: sent to the DM, thread or channel the task was asked in.

Job: :func:`address_of` is the reply address a turn carries (``InboundMessage.address``), so
a task scheduled in it remembers where it came from; :func:`deliver` sends a stored delivery
(luna.scheduler.delivery) back there.

Invariants:
- A DM is sent through the user's DM channel, opened when the bot has none (after a restart
  it never has one); a thread or channel is looked up, fetched when not cached.
- When the channel is gone or closed to the bot (not found, forbidden), the result goes to
  the person's DM instead (said in the message), so it is not lost.
- Every Discord call has a timeout; failures are logged and make ``deliver`` return False
  (the router tries again later); nothing is raised.
- Long results are split at Discord's 2,000 characters like replies are.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import discord

from luna.frontends.discord.reply import HTTP_TIMEOUT, safe_call
from luna.frontends.discord.split import split_message
from luna.observe import log_event

log = logging.getLogger(__name__)

MOVED_NOTE = "-# (sent here: the channel it was asked in is gone or closed to me)\n"


def address_of(channel: Any, user_id: str, is_dm: bool) -> dict[str, Any]:
    """Where a later answer to this turn goes (ids as text)."""
    return {"channel_id": str(channel.id), "user_id": str(user_id), "is_dm": bool(is_dm)}


async def _dm(client: discord.Client, user_id: int) -> discord.abc.Messageable | None:
    user = client.get_user(user_id)
    if user is None:
        user = await safe_call("fetch_user", client.fetch_user(user_id))
    if user is None:
        return None
    if user.dm_channel is not None:
        return user.dm_channel
    return await safe_call("create_dm", user.create_dm())


async def _channel(client: discord.Client, channel_id: int) -> discord.abc.Messageable | None:
    channel = client.get_channel(channel_id)
    if channel is not None:
        return channel  # type: ignore[return-value]
    try:
        return await asyncio.wait_for(client.fetch_channel(channel_id), HTTP_TIMEOUT)  # type: ignore[return-value]
    except (discord.NotFound, discord.Forbidden):
        return None
    except (discord.HTTPException, TimeoutError) as e:
        log_event("discord_error", op="fetch_channel", error=type(e).__name__)
        raise


async def _send(channel: discord.abc.Messageable, text: str) -> bool:
    for chunk in split_message(text) or [text]:
        if await safe_call("send_scheduled", channel.send(chunk)) is None:
            return False
    return True


async def deliver(client: discord.Client, address: dict[str, Any], text: str) -> bool:
    """Send ``text`` to ``address`` (see the module invariants); True once it was sent."""
    try:
        user_id = int(address.get("user_id") or 0)
        channel_id = int(address.get("channel_id") or 0)
    except (TypeError, ValueError):
        log.warning("discord: a scheduled delivery has a bad address %r", address)
        return False
    try:
        if address.get("is_dm") or not channel_id:
            target = await _dm(client, user_id) if user_id else None
            return target is not None and await _send(target, text)
        channel = await _channel(client, channel_id)
    except (discord.HTTPException, TimeoutError):
        return False
    if channel is not None:
        return await _send(channel, text)  # a failed send is tried again later
    if not user_id:
        return False
    target = await _dm(client, user_id)  # the place is gone or closed: tell the person
    return target is not None and await _send(target, MOVED_NOTE + text)
