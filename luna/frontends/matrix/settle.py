"""When a Matrix sync token may be saved: once every message of its batch, and of every batch
before it, is settled.

Job: :class:`TokenKeeper` stands between the sync loop and the channel layer's ledger, whose
cursor the token is (``ChannelLedger``, account ``matrix``/the bot's user id): the loop hands it
each batch's ``next_batch`` (:meth:`batch_done`) along with the messages of that batch the
channel layer admitted (:meth:`hold`); the layer's receipts settle them (:meth:`settle`).
The newest token with nothing unsettled at or before it is saved.

Invariants:
- A message is settled when its turn's user message is committed (``stored``), when its turn
  ended without that (``answered``), or when the layer dropped it. A message still in a burst,
  or queued behind a running turn of its session, is not: if Luna stops then, the saved token
  is older than its batch and the next start syncs it again, so it is never lost.
- Tokens are saved in batch order, never an older one after a newer one. A batch with nothing
  admitted (state, reactions, messages nobody answers) is settled at once.
- Never stuck: a message unsettled after ``max_hold`` seconds (twice ``agent.turn_timeout``:
  no turn waits that long for another) is settled by force and logged
  (``matrix_sync_unsettled``), so one lost receipt cannot hold the token back for good.
- A batch holding a message answered before the stop and one not yet settled is synced
  again as a whole (two sessions' messages in one sync batch, and a stop between their
  turns); the answered one is on the ledger by then and the front-end skips it.
- The token is the ledger's cursor, saved on its own (fsynced), never with a turn: unlike
  Telegram's offset, it may pass a committed message only once the rest of its batch has
  settled, so the turn's rows go first (``ChannelLedger.stored``) and the token later. No
  saved token means Luna never synced this account: the first sync's timeline is history.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Iterable

from luna.frontends.channels.cursor import ChannelLedger
from luna.observe import log_event


class TokenKeeper:
    """The sync token of one bot account, saved when its batch has settled."""

    def __init__(self, ledger: ChannelLedger, *, max_hold: float) -> None:
        self.ledger = ledger
        self.max_hold = max_hold
        self._since: dict[str, float] = {}  # message id -> when it was held (monotonic)
        self._current: set[str] = set()  # admitted messages of the batch being handled
        self._batches: deque[tuple[str, set[str]]] = deque()  # (next_batch, unsettled)
        self._where: dict[str, set[str]] = {}  # message id -> the set holding it
        self._lock = asyncio.Lock()

    async def load(self) -> str | None:
        return await self.ledger.cursor()

    def hold(self, event_id: str) -> None:
        """The layer admitted ``event_id`` from the batch being handled."""
        self._current.add(event_id)
        self._where[event_id] = self._current
        self._since[event_id] = time.monotonic()

    def settle(self, event_ids: Iterable[str]) -> None:
        for event_id in event_ids:
            pending = self._where.pop(event_id, None)
            self._since.pop(event_id, None)
            if pending is not None:
                pending.discard(event_id)

    async def batch_done(self, token: str) -> None:
        """The batch that ends at ``token`` was handed over; save what may be saved."""
        self._batches.append((token, self._current))
        self._current = set()
        await self.flush()

    @property
    def unsettled(self) -> int:
        return sum(len(pending) for _, pending in self._batches)

    async def flush(self) -> None:
        """Save the newest token whose batch and all before it are settled."""
        async with self._lock:
            stale = [e for e, t in self._since.items() if time.monotonic() - t > self.max_hold]
            if stale:
                log_event("matrix_sync_unsettled", events=len(stale), after_s=self.max_hold)
                self.settle(stale)
            newest = None
            while self._batches and not self._batches[0][1]:
                newest = self._batches.popleft()[0]
            if newest is not None:
                await self.ledger.save_cursor(newest, durable=True)
