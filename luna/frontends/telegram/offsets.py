"""Which Telegram updates are settled, and so the offset that acknowledges them.

Job: :class:`Offsets` tracks every update received and whether it is settled: it started no
turn (dropped), or its turn's user message is committed. :attr:`Offsets.offset` is what
getUpdates is called with; :class:`TelegramReceipts` is the channel layer's ``Receipts``
that settles them and writes the offset with each stored turn (``ChannelLedger``).

Invariants:
- The offset never passes an unsettled update: it is the lowest unsettled update id, or one
  past the highest received when all are settled. Telegram forgets what is below it, so an
  update the agent has not committed is always fetched again after a restart.
- An update id below the saved offset, or already received, is refused (a replay).
- A turn's offset and its rows are one durable commit (``ChannelLedger.stored``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Sequence

from luna.frontends.channels.contract import InboundEvent
from luna.frontends.channels.cursor import ChannelLedger


class Offsets:
    """Received and settled update ids."""

    def __init__(self, start: int) -> None:
        self.floor = start  # everything below is settled and saved
        self.seen: set[int] = set()
        self.settled: set[int] = set()
        self.saved = start
        self.changed = asyncio.Event()
        self._waiters: dict[int, asyncio.Future[None]] = {}

    def receive(self, update_id: int) -> bool:
        """True the first time a new update is offered."""
        if update_id < self.floor or update_id in self.seen:
            return False
        self.seen.add(update_id)
        return True

    def settle(self, update_ids: Iterable[int]) -> None:
        for uid in update_ids:
            if uid in self.seen:
                self.settled.add(uid)
            waiter = self._waiters.pop(uid, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
        offset = self.offset
        self.seen = {u for u in self.seen if u >= offset}
        self.settled = {u for u in self.settled if u >= offset}
        self.floor = max(self.floor, offset) if not self.seen else self.floor
        self.changed.set()

    @property
    def offset(self) -> int:
        pending = self.seen - self.settled
        if pending:
            return min(pending)
        return max(self.seen, default=self.floor - 1) + 1

    def is_settled(self, update_id: int) -> bool:
        return update_id < self.offset or update_id in self.settled

    async def wait_settled(self, update_id: int, hold: float) -> bool:
        """Wait until ``update_id`` is settled; False after ``hold`` seconds."""
        if self.is_settled(update_id):
            return True
        waiter = self._waiters.setdefault(update_id, asyncio.get_running_loop().create_future())
        try:
            await asyncio.wait_for(asyncio.shield(waiter), hold)
        except TimeoutError:
            return False
        return True


class TelegramReceipts:
    """The channel layer's receipts for Telegram: settle updates, save the offset."""

    def __init__(self, offsets: Offsets, ledger: ChannelLedger) -> None:
        self.offsets = offsets
        self.ledger = ledger

    def dropped(self, event: InboundEvent) -> None:
        self.offsets.settle([int(event.message_id)])

    async def stored(self, events: Sequence[InboundEvent], message_id: int) -> None:
        self.offsets.settle(int(e.message_id) for e in events)
        offset = self.offsets.offset
        await self.ledger.stored(str(offset), message_id, events)
        self.offsets.saved = max(self.offsets.saved, offset)

    async def answered(self, events: Sequence[InboundEvent]) -> None:
        """The turn ended. Settled now even if its message was never committed (the turn
        failed before, and the person was told): one failure must not hold the offset."""
        self.offsets.settle(int(e.message_id) for e in events)
        await self.ledger.answered([e.message_id for e in events])

    async def save_if_moved(self) -> None:
        """Save the offset when dropped updates moved it (no fsync: replaying those is
        harmless)."""
        offset = self.offsets.offset
        if offset > self.offsets.saved:
            await self.ledger.save_cursor(str(offset))
            self.offsets.saved = offset
