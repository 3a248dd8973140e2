"""Which Matrix messages Luna has taken in for good: the ``matrix_taken`` table (migration
``m013_matrix_taken``).

Job: :class:`TakenEvents` records the event id of each message whose turn's user message is
committed, and answers, for a message the sync hands over, whether it was taken in before:
after a restart, a batch synced again (its token was not saved, another of its messages had
not settled) brings such messages back, and they must not start a second turn.

Invariants:
- An event is recorded durably (fsync) before the sync token may move past its batch
  (``Receipts.stored`` records, then settles): a restart either finds the record or syncs a
  batch whose token is older than the event, never neither.
- Rows older than ``KEEP_DAYS`` are deleted in the same transaction that adds rows: a record
  matters only while the saved token is older than its batch, and ``settle`` lets no batch
  hold the token back longer than ``max_hold`` while Luna runs. (A Luna stopped for longer
  than ``KEEP_DAYS`` with such a batch pending may answer its answered message once more.)
- All database work runs off the event loop.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Sequence

from luna.memory.storage.store import Store

KEEP_DAYS = 7


def _stamp(at: dt.datetime) -> str:
    return at.isoformat(timespec="seconds")


class TakenEvents:
    """The ``matrix_taken`` rows of one bot account."""

    def __init__(self, store: Store, user_id: str) -> None:
        self.db = store
        self.user_id = user_id

    def _record(self, event_ids: Sequence[str]) -> None:
        now = dt.datetime.now(dt.UTC)
        with self.db.transaction(durable=True) as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO matrix_taken (user_id, event_id, created_at) "
                "VALUES (?, ?, ?)",
                [(self.user_id, eid, _stamp(now)) for eid in event_ids],
            )
            conn.execute(
                "DELETE FROM matrix_taken WHERE created_at < ?",
                (_stamp(now - dt.timedelta(days=KEEP_DAYS)),),
            )

    def _has(self, event_id: str) -> bool:
        rows = self.db.query(
            "SELECT 1 FROM matrix_taken WHERE user_id = ? AND event_id = ?",
            (self.user_id, event_id),
        )
        return bool(rows)

    async def record(self, event_ids: Sequence[str]) -> None:
        """The turn of ``event_ids`` has its user message committed."""
        if event_ids:
            await asyncio.to_thread(self._record, list(event_ids))

    async def has(self, event_id: str) -> bool:
        """Whether ``event_id`` was taken in (by this process or one before it)."""
        return await asyncio.to_thread(self._has, event_id)
