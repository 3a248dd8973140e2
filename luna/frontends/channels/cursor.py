"""Where a chat app's reading stands, in the memory database (migration
``m012_channel_cursors``).

Job: :class:`ChannelLedger` keeps one app account's read position (Telegram's update offset)
and the turns it acknowledged but has not answered yet, off the event loop.

Invariants:
- :meth:`ChannelLedger.stored` writes the new cursor and the turn's rows in one durable
  transaction: an event is never acknowledged without its turn being on record, so a restart
  either gets the event again from the app or finds it here.
- A turn's rows are deleted once its reply was written (:meth:`answered`); what is left at
  start is what a dead process committed and never answered (:meth:`unanswered`).
- Cursors and events are stored as text; the app owns their meaning.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from luna.memory.storage.store import Store


@dataclass(frozen=True)
class Unanswered:
    """A turn committed before a restart and never answered."""

    event_ids: tuple[str, ...]
    message_id: int  # the stored user message
    events: tuple[dict[str, Any], ...]  # the adapter's JSON of each event


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class ChannelLedger:
    """The cursor and unanswered turns of one app account."""

    def __init__(self, store: Store, channel: str, account: str) -> None:
        self.db = store
        self.key = (channel, account)

    def _cursor(self) -> str | None:
        rows = self.db.query(
            "SELECT cursor FROM channel_cursors WHERE channel = ? AND account = ?", self.key
        )
        return str(rows[0][0]) if rows else None

    def _save(self, conn: Any, cursor: str) -> None:
        conn.execute(
            "INSERT INTO channel_cursors (channel, account, cursor, updated_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT (channel, account) DO UPDATE SET "
            "cursor = excluded.cursor, updated_at = excluded.updated_at",
            (*self.key, cursor, _now()),
        )

    def _save_cursor(self, cursor: str) -> None:
        with self.db.transaction(durable=False) as conn:
            self._save(conn, cursor)

    def _stored(
        self, cursor: str | None, message_id: int, events: Sequence[tuple[str, dict[str, Any]]]
    ) -> None:
        with self.db.transaction(durable=True) as conn:
            if cursor is not None:
                self._save(conn, cursor)
            conn.executemany(
                "INSERT OR REPLACE INTO channel_turns "
                "(channel, account, event_id, message_id, event, created_at) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [(*self.key, eid, message_id, json.dumps(e), _now()) for eid, e in events],
            )

    def _answered(self, event_ids: Sequence[str]) -> None:
        with self.db.transaction(durable=True) as conn:
            conn.executemany(
                "DELETE FROM channel_turns WHERE channel = ? AND account = ? AND event_id = ?",
                [(*self.key, eid) for eid in event_ids],
            )

    def _unanswered(self) -> list[Unanswered]:
        rows = self.db.query(
            "SELECT event_id, message_id, event FROM channel_turns "
            "WHERE channel = ? AND account = ? ORDER BY message_id, rowid",
            self.key,
        )
        turns: dict[int, list[tuple[str, dict[str, Any]]]] = {}
        for event_id, message_id, event in rows:
            turns.setdefault(int(message_id), []).append((str(event_id), json.loads(event)))
        return [
            Unanswered(tuple(e for e, _ in items), mid, tuple(j for _, j in items))
            for mid, items in turns.items()
        ]

    async def cursor(self) -> str | None:
        """The saved cursor, or None before the first one."""
        return await asyncio.to_thread(self._cursor)

    async def save_cursor(self, cursor: str) -> None:
        """Move the cursor past events that started no turn (not fsynced: a replay of those
        after a power cut starts no turn either)."""
        await asyncio.to_thread(self._save_cursor, cursor)

    async def stored(
        self, cursor: str | None, message_id: int, events: Sequence[tuple[str, dict[str, Any]]]
    ) -> None:
        """A turn's user message is committed: record its events and move the cursor."""
        await asyncio.to_thread(self._stored, cursor, message_id, events)

    async def answered(self, event_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self._answered, event_ids)

    async def unanswered(self) -> list[Unanswered]:
        return await asyncio.to_thread(self._unanswered)
