"""Long polling: getUpdates in a loop, with the offset only ever past settled updates.

Job: :func:`poll` fetches updates and hands each new one to ``handle`` until ``stop``.

Invariants:
- getUpdates is called with ``Offsets.offset``: Telegram forgets only settled updates.
- While turns are still committing, Telegram sends the unsettled updates again; those are
  refused by ``Offsets.receive``, and the loop waits for a settle (at most ``IDLE_WAIT``)
  instead of spinning.
- Network failures and flood waits are waited out (a backoff from ``retry_backoff``,
  doubling to ``MAX_BACKOFF``; ``retry_after`` as given); a refused token or a conflicting
  reader ends the loop with a ``SetupError``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from telegram import Bot, Update

from luna.frontends.channels.contract import ChannelError, RateLimitedError
from luna.frontends.telegram.calls import call
from luna.frontends.telegram.offsets import Offsets, TelegramReceipts
from luna.observe import log_event

log = logging.getLogger(__name__)

ALLOWED_UPDATES = ("message", "callback_query")
IDLE_WAIT = 1.0
MAX_BACKOFF = 30.0


async def poll(
    bot: Bot,
    offsets: Offsets,
    receipts: TelegramReceipts,
    handle: Callable[[Update], Awaitable[None]],
    *,
    hold: int,
    retry_backoff: float,
    stop: asyncio.Event,
) -> None:
    backoff = retry_backoff
    while not stop.is_set():
        try:
            updates = await call(
                bot.get_updates(
                    offset=offsets.offset,
                    timeout=hold,
                    allowed_updates=ALLOWED_UPDATES,
                    read_timeout=hold + 10,
                ),
                deadline=hold + 20,
            )
        except RateLimitedError as e:
            await asyncio.sleep(e.retry_after)
            continue
        except ChannelError as e:
            log.warning("telegram: getUpdates failed (%s); again in %.0fs", e, backoff)
            log_event("channel_error", frontend="telegram", op="get_updates", error=str(e))
            await asyncio.sleep(backoff)
            backoff = min(MAX_BACKOFF, backoff * 2)
            continue
        backoff = retry_backoff
        new = [u for u in updates if offsets.receive(u.update_id)]
        for update in new:
            await handle(update)
        await receipts.save_if_moved()
        if updates and not new:
            offsets.changed.clear()
            try:
                await asyncio.wait_for(offsets.changed.wait(), IDLE_WAIT)
            except TimeoutError:
                pass
