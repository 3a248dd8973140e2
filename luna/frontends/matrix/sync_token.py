"""Where the Matrix sync stands: the ``matrix_sync`` table (migration ``m011_matrix_sync``).

Job: load and save the ``next_batch`` token of the bot's account in the memory database, off
the event loop.

Invariants:
- A token is saved only once every message of the batch it ends (and of the batches before
  it) that Luna took in has settled: its turn's user message committed, or dropped
  (``luna.frontends.matrix.settle``), so a restart resumes where nothing is lost.
- No row means Luna never synced this account: the first sync's timeline is history, never
  answered.
- The commit is durable (fsync): a token that survived means its messages were taken in.
"""

from __future__ import annotations

import asyncio
import datetime as dt

from luna.memory.storage.store import Store


class SyncTokens:
    """The ``matrix_sync`` rows of one database."""

    def __init__(self, store: Store) -> None:
        self.db = store

    def _load(self, user_id: str) -> str | None:
        rows = self.db.query("SELECT next_batch FROM matrix_sync WHERE user_id = ?", (user_id,))
        return str(rows[0][0]) if rows else None

    def _save(self, user_id: str, token: str) -> None:
        now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        with self.db.transaction(durable=True) as conn:
            conn.execute(
                "INSERT INTO matrix_sync (user_id, next_batch, updated_at) VALUES (?, ?, ?) "
                "ON CONFLICT (user_id) DO UPDATE SET next_batch = excluded.next_batch, "
                "updated_at = excluded.updated_at",
                (user_id, token, now),
            )

    async def load(self, user_id: str) -> str | None:
        """The saved token of ``user_id``, or None before its first sync."""
        return await asyncio.to_thread(self._load, user_id)

    async def save(self, user_id: str, token: str) -> None:
        await asyncio.to_thread(self._save, user_id, token)
