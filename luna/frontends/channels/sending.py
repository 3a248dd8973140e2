"""Calls to a chat app that honour its rate limits and never raise into the bot.

Job: :func:`attempt` runs one adapter call under a deadline: a rate limit's ``retry_after`` is
waited out and the call made again while the wait fits in ``patience``; any other failure is
logged and returned as None. :func:`send_text` sends one message that way, halving it while
the app still finds it too long (its own count: Telegram counts UTF-16 code units).

Invariants:
- A ``retry_after`` is never shortened: the next call to the app happens after it.
- A reply that must not be lost (a final reply, a scheduled result) is given a long patience
  (``FINAL_PATIENCE``); a live streaming edit none (the next edit catches up).
- Every attempt has a timeout (``CALL_TIMEOUT``); CancelledError propagates.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

from luna.frontends.channels.contract import (
    ChannelAdapter,
    ChannelError,
    RateLimitedError,
    Sent,
    TooLongError,
)
from luna.frontends.channels.split import MIN_LIMIT, split_message
from luna.observe import log_event

log = logging.getLogger(__name__)

T = TypeVar("T")
CALL_TIMEOUT = 30.0
FINAL_PATIENCE = 600.0  # seconds of rate limits a final reply waits out before giving up
LIVE_PATIENCE = 0.0


async def attempt(
    app: str,
    op: str,
    call: Callable[[], Awaitable[T]],
    *,
    patience: float = FINAL_PATIENCE,
    reraise: tuple[type[ChannelError], ...] = (),
) -> T | None:
    """``await call()`` with retries on rate limits; None (logged) when it failed, except for
    the error types in ``reraise``, which the caller handles."""
    waited = 0.0
    while True:
        try:
            return await asyncio.wait_for(call(), CALL_TIMEOUT)
        except RateLimitedError as e:
            log_event(
                "channel_rate_limited", frontend=app, op=op, retry_after=round(e.retry_after, 3)
            )
            if waited + e.retry_after > patience:
                log.warning("%s %s: rate limited for %.1fs; not retried", app, op, e.retry_after)
                return None
            await asyncio.sleep(e.retry_after)
            waited += e.retry_after
        except ChannelError as e:
            if isinstance(e, reraise):
                raise
            log.warning("%s %s failed: %s", app, op, e)
            log_event("channel_error", frontend=app, op=op, status=e.status, error=type(e).__name__)
            return None
        except TimeoutError:
            log.warning("%s %s timed out", app, op)
            log_event("channel_error", frontend=app, op=op, error="timeout")
            return None


async def send_text(
    app: ChannelAdapter, conversation: object, text: str, what: str = "reply"
) -> Sent | None:
    """Send ``text`` as a new message (or more, when the app finds it too long); the first
    message sent, or None when it could not be sent."""
    try:
        return await attempt(
            app.name, f"send_{what}", lambda: app.send(conversation, text), reraise=(TooLongError,)
        )
    except TooLongError:
        if len(text) < 2 * MIN_LIMIT:
            log_event("channel_error", frontend=app.name, op=f"send_{what}", error="too_long")
            return None
        parts = split_message(text, max(MIN_LIMIT, len(text) // 2))
        sent = [await send_text(app, conversation, part, what) for part in parts]
        return sent[0] if sent and all(s is not None for s in sent) else None
