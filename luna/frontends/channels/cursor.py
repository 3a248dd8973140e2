"""Where a chat app's reading stands, in the memory database (migrations
``m012_channel_cursors``, ``m014_channel_turns_answered``).

Job: :class:`ChannelLedger` keeps one app account's read position (Telegram's update offset,
Matrix's sync token) and the turns it took in: those not answered yet, which a restart
answers (:meth:`unanswered`, run by ``Channel.resume``), and those answered lately, which an
app that may be handed an event again (Matrix re-syncs a batch whose token was not saved)
recognises (:meth:`has`). All of it off the event loop.

Invariants:
- :meth:`ChannelLedger.stored` writes the turn's rows (and the new cursor, when the app moves
  it with the turn) in one durable transaction: an event is never acknowledged without its
  turn being on record, so a restart either gets the event again from the app or finds it
  here.
- A turn's rows are marked answered once its reply was written (:meth:`answered`); what is
  left unanswered at start is what a dead process committed and never answered. An answered
  row keeps the event's id only (its JSON, the message's text with it, is dropped) and is
  kept ``KEEP_DAYS`` (pruned when rows are added), then forgotten: an app must not
  hand over an event older than that again (Matrix: the token keeper never holds a batch
  back that long while Luna runs; a Luna stopped for longer with a batch held back may
  answer an answered message of it once more).
- Cursors are stored as text and events as the app's JSON (:class:`EventCodec`); the app
  owns their meaning. An event's files are not kept: a resumed turn reads them from its
  stored message.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from luna.frontends.channels.contract import InboundEvent
from luna.memory.storage.store import Store

KEEP_DAYS = 7


@dataclass(frozen=True)
class EventCodec:
    """How one app keeps an :class:`InboundEvent` in the database and reads it back."""

    encode: Callable[[InboundEvent], dict[str, Any]]
    decode: Callable[[dict[str, Any]], InboundEvent]


@dataclass(frozen=True)
class Unanswered:
    """A turn committed before a restart and never answered."""

    event_ids: tuple[str, ...]
    message_id: int  # the stored user message
    events: tuple[InboundEvent, ...]


def _stamp(at: dt.datetime) -> str:
    return at.isoformat(timespec="seconds")


def _now() -> str:
    return _stamp(dt.datetime.now(dt.UTC))


class ChannelLedger:
    """The cursor and the turns of one app account."""

    def __init__(self, store: Store, channel: str, account: str, codec: EventCodec) -> None:
        self.db = store
        self.key = (channel, account)
        self.codec = codec

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

    def _save_cursor(self, cursor: str, durable: bool) -> None:
        with self.db.transaction(durable=durable) as conn:
            self._save(conn, cursor)

    def _stored(self, cursor: str | None, message_id: int, events: Sequence[InboundEvent]) -> None:
        now = dt.datetime.now(dt.UTC)
        rows = [(*self.key, e.message_id, message_id, json.dumps(self.codec.encode(e)),
                 _stamp(now)) for e in events]  # fmt: skip
        with self.db.transaction(durable=True) as conn:
            if cursor is not None:
                self._save(conn, cursor)
            conn.executemany(
                "INSERT OR REPLACE INTO channel_turns "
                "(channel, account, event_id, message_id, event, created_at, answered_at) "
                "VALUES (?, ?, ?, ?, ?, ?, NULL)",
                rows,
            )
            conn.execute(
                "DELETE FROM channel_turns WHERE channel = ? AND account = ? AND answered_at < ?",
                (*self.key, _stamp(now - dt.timedelta(days=KEEP_DAYS))),
            )

    def _answered(self, event_ids: Sequence[str]) -> None:
        now = _now()
        with self.db.transaction(durable=True) as conn:
            conn.executemany(
                "UPDATE channel_turns SET answered_at = ?, event = '{}' WHERE channel = ? "
                "AND account = ? AND event_id = ? AND answered_at IS NULL",
                [(now, *self.key, eid) for eid in event_ids],
            )

    def _has(self, event_id: str) -> bool:
        rows = self.db.query(
            "SELECT 1 FROM channel_turns WHERE channel = ? AND account = ? AND event_id = ?",
            (*self.key, event_id),
        )
        return bool(rows)

    def _unanswered(self) -> list[Unanswered]:
        rows = self.db.query(
            "SELECT event_id, message_id, event FROM channel_turns "
            "WHERE channel = ? AND account = ? AND answered_at IS NULL ORDER BY message_id, rowid",
            self.key,
        )
        turns: dict[int, list[tuple[str, InboundEvent]]] = {}
        for event_id, message_id, event in rows:
            decoded = self.codec.decode(json.loads(event))
            turns.setdefault(int(message_id), []).append((str(event_id), decoded))
        return [
            Unanswered(tuple(e for e, _ in items), mid, tuple(ev for _, ev in items))
            for mid, items in turns.items()
        ]

    async def cursor(self) -> str | None:
        """The saved cursor, or None before the first one."""
        return await asyncio.to_thread(self._cursor)

    async def save_cursor(self, cursor: str, *, durable: bool = False) -> None:
        """Move the cursor on its own (``durable``: fsynced; Telegram moves it past events
        that started no turn without, since a replay of those after a power cut starts no
        turn either)."""
        await asyncio.to_thread(self._save_cursor, cursor, durable)

    async def stored(
        self, cursor: str | None, message_id: int, events: Sequence[InboundEvent]
    ) -> None:
        """A turn's user message is committed: record its events (and move the cursor)."""
        await asyncio.to_thread(self._stored, cursor, message_id, list(events))

    async def answered(self, event_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self._answered, list(event_ids))

    async def has(self, event_id: str) -> bool:
        """Whether ``event_id`` started a turn (answered, or still to be) that is on record."""
        return await asyncio.to_thread(self._has, event_id)

    async def unanswered(self) -> list[Unanswered]:
        return await asyncio.to_thread(self._unanswered)
