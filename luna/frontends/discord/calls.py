"""One discord.py call with a timeout, its errors translated to the channel layer's.

Invariant: the only place discord.py's HTTP errors are read: 404 is ``MessageGoneError``,
403 ``UnreachableError``, 429 ``RateLimitedError`` (discord.py waits most rate limits out
itself), anything else ``ChannelError``; a timeout stays ``TimeoutError``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

import discord

from luna.frontends.channels.contract import (
    ChannelError,
    MessageGoneError,
    RateLimitedError,
    UnreachableError,
)
from luna.frontends.channels.sending import CALL_TIMEOUT

T = TypeVar("T")


async def call(coro: Awaitable[T]) -> T:
    """Await a discord.py call under ``CALL_TIMEOUT``, its errors translated."""
    try:
        return await asyncio.wait_for(coro, CALL_TIMEOUT)
    except discord.NotFound as e:
        raise MessageGoneError(f"Discord 404 {e.code}", status=404) from e
    except discord.Forbidden as e:
        raise UnreachableError(f"Discord 403 {e.code}", status=403) from e
    except discord.RateLimited as e:  # longer than discord.py's own patience
        raise RateLimitedError(e.retry_after) from e
    except discord.HTTPException as e:
        if e.status == 429:
            raise RateLimitedError(_retry_after(e)) from e
        raise ChannelError(f"Discord {e.status} {e.code}", status=e.status) from e


def _retry_after(error: discord.HTTPException) -> float:
    """The Retry-After header of a 429 (1 s when it has none or it is not a number)."""
    headers = getattr(error.response, "headers", None) or {}
    try:
        return float(headers.get("Retry-After", 1.0))
    except (TypeError, ValueError):
        return 1.0
