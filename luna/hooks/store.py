"""The ``hook_events`` table (migration ``m009_hook_events``): webhook events, kept durably.

Job: blocking SQL over the memory database's :class:`~luna.memory.storage.store.Store`;
async callers go through ``asyncio.to_thread``.

Invariants:
- :meth:`HookStore.accept` commits an event durably (fsync) before it returns its id: the web
  answers 202 only after that, so an acknowledged event survives ``kill -9`` and power loss.
- ``(hook, signature)`` is unique: a request sent twice is stored once (:meth:`accept`
  answers None for the second); a signature covers the timestamp, so a new event never
  collides with an old one.
- An event runs at most once: it is claimed (``running``) in its own commit before its turn
  starts; one found ``running`` at start was cut off (a crash, a shutdown) and becomes
  ``interrupted``, never run again, because a half-run turn may have had side effects.
- An event's end and the delivery of its result are one transaction (the delivery row in the
  scheduler's ``deliveries`` table, shown by its router).
- Finished events older than the retention are pruned; pending ones never are.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from luna.memory.storage.store import Store
from luna.scheduler.model import NewDelivery, from_db, to_db
from luna.scheduler.store import TaskStore

RETENTION = dt.timedelta(days=30)
FINISHED = ("done", "silent", "failed", "interrupted")


@dataclass(frozen=True)
class HookEvent:
    id: int
    hook: str
    body: str
    session_id: str
    received_at: dt.datetime
    state: str
    reply: str | None = None
    error: str | None = None

    COLUMNS = "id, hook, body, session_id, received_at, state, reply, error"

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> HookEvent:
        id_, hook, body, session, received, state, reply, error = row
        return cls(
            int(id_), hook, body, session, from_db(received) or dt.datetime.now(dt.UTC), state,
            reply, error,
        )  # fmt: skip


class HookStore:
    """Blocking access to ``hook_events``; one instance per open database."""

    def __init__(self, store: Store) -> None:
        self.db = store

    def accept(
        self, hook: str, signature: str, body: str, session_id: str, now: dt.datetime
    ) -> int | None:
        """Store a new event durably; its id, or None when this signature was stored before."""
        with self.db.transaction(durable=True) as conn:
            row = conn.execute(
                "INSERT INTO hook_events (hook, signature, body, session_id, received_at) "
                "VALUES (?, ?, ?, ?, ?) ON CONFLICT (hook, signature) DO NOTHING RETURNING id",
                (hook, signature.lower(), body, session_id, to_db(now)),
            ).fetchone()
        return None if row is None else int(row[0])

    def get(self, event_id: int) -> HookEvent | None:
        rows = self.db.query(
            f"SELECT {HookEvent.COLUMNS} FROM hook_events WHERE id = ?", (event_id,)
        )
        return HookEvent.from_row(rows[0]) if rows else None

    def pending(self) -> list[HookEvent]:
        rows = self.db.query(
            f"SELECT {HookEvent.COLUMNS} FROM hook_events INDEXED BY hook_events_state "
            "WHERE state = 'pending' ORDER BY id"
        )
        return [HookEvent.from_row(r) for r in rows]

    def claim(self, event_id: int, now: dt.datetime) -> bool:
        """Mark a pending event running (committed before its turn starts); False when it is
        not pending any more."""
        with self.db.transaction() as conn:
            cur = conn.execute(
                "UPDATE hook_events SET state = 'running', started_at = ? "
                "WHERE id = ? AND state = 'pending'",
                (to_db(now), event_id),
            )
            return cur.rowcount > 0

    def unclaim(self, event_id: int) -> None:
        """Put back an event whose turn was refused before it began (Luna shutting down)."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE hook_events SET state = 'pending', started_at = NULL "
                "WHERE id = ? AND state = 'running'",
                (event_id,),
            )

    def finish(
        self,
        event_id: int,
        now: dt.datetime,
        *,
        state: str,
        reply: str | None = None,
        error: str | None = None,
        delivery: NewDelivery | None = None,
    ) -> int | None:
        """Record how a running event ended and write its delivery, in one transaction;
        returns the delivery's id."""
        with self.db.transaction() as conn:
            conn.execute(
                "UPDATE hook_events SET state = ?, finished_at = ?, reply = ?, error = ? "
                "WHERE id = ? AND state = 'running'",
                (state, to_db(now), reply, error, event_id),
            )
            return TaskStore.add_delivery(conn, delivery, now) if delivery else None

    def recover(
        self, now: dt.datetime, notice: Callable[[HookEvent], NewDelivery | None]
    ) -> list[HookEvent]:
        """Mark events left running by a stopped process ``interrupted``, each with the
        delivery ``notice`` makes for it, in one transaction; returns them."""
        with self.db.transaction() as conn:
            rows = conn.execute(
                f"SELECT {HookEvent.COLUMNS} FROM hook_events INDEXED BY hook_events_state "
                "WHERE state = 'running' ORDER BY id"
            ).fetchall()
            events = [HookEvent.from_row(r) for r in rows]
            for event in events:
                conn.execute(
                    "UPDATE hook_events SET state = 'interrupted', finished_at = ? WHERE id = ?",
                    (to_db(now), event.id),
                )
                d = notice(event)
                if d is not None:
                    TaskStore.add_delivery(conn, d, now)
        return events

    def prune(self, now: dt.datetime) -> int:
        """Delete finished events older than ``RETENTION``; returns how many."""
        marks = ", ".join("?" * len(FINISHED))
        with self.db.transaction(durable=False) as conn:
            cur = conn.execute(
                f"DELETE FROM hook_events WHERE state IN ({marks}) AND received_at < ?",
                (*FINISHED, to_db(now - RETENTION)),
            )
            return cur.rowcount

    def recent(self, limit: int = 20) -> list[HookEvent]:
        rows = self.db.query(
            f"SELECT {HookEvent.COLUMNS} FROM hook_events ORDER BY id DESC LIMIT ?", (limit,)
        )
        return [HookEvent.from_row(r) for r in rows]
