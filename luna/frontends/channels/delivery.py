"""Scheduled results and reminders, sent back to the conversation they were asked in.

Job: :class:`ScheduledDelivery` is the ``deliver`` function a channel registers with the
scheduler's :class:`~luna.scheduler.delivery.DeliveryRouter`: the adapter says where the
stored address is now (``destination``), the layer splits the text at the app's limit and
sends it, waiting out rate limits.

Invariants:
- True only once every part was sent; False (the router tries again later) when the app
  cannot be reached, the place is nowhere, or a part failed. Nothing is raised.
- A fallback place (the person's private chat when the group is gone) gets the adapter's
  note before the text, so the person knows why it arrived there.
"""

from __future__ import annotations

import asyncio
import logging

from luna.frontends.channels.contract import ChannelAdapter, ChannelError
from luna.frontends.channels.sending import CALL_TIMEOUT, send_text
from luna.frontends.channels.split import split_message
from luna.observe import log_event
from luna.scheduler.model import Delivery

log = logging.getLogger(__name__)


class ScheduledDelivery:
    """Shows stored deliveries of one app."""

    def __init__(self, app: ChannelAdapter) -> None:
        self.app = app

    async def __call__(self, delivery: Delivery) -> bool:
        address = dict(delivery.target.address)
        try:
            where = await asyncio.wait_for(self.app.destination(address), CALL_TIMEOUT)
        except (ChannelError, TimeoutError) as e:
            log_event("channel_error", frontend=self.app.name, op="destination",
                      error=type(e).__name__)  # fmt: skip
            return False
        if where is None:
            log.warning("%s: nowhere to deliver %s to (%r)", self.app.name, delivery.id, address)
            return False
        text = where.note + delivery.text
        for chunk in split_message(text, self.app.limit) or [text]:
            if await send_text(self.app, where.conversation, chunk, "scheduled") is None:
                return False
        return True
