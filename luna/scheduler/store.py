"""The scheduler's tables (migration ``m006_scheduler``): tasks, their runs, deliveries.

Job: blocking SQL over the memory database's :class:`~luna.memory.storage.store.Store` (one
connection, one lock); async callers go through ``asyncio.to_thread``.

Invariants:
- A state change and everything it implies (the run row, the task's next time, the
  deliveries it produces) is written in one transaction: after ``kill -9`` either all of it
  happened or none of it did.
- Transitions are conditional on the state the caller saw (``state`` and ``next_run_at``):
  a task cancelled or re-planned by another process meanwhile is left alone, so no task is
  claimed twice.
- The next due task is found through the partial index ``scheduled_tasks_due``: O(log n).
- A delivery is claimed before it is shown; a claim older than ``stale_s`` (its process died)
  may be taken again, so a delivery is shown at least once (see luna.scheduler.delivery).
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from typing import Any

from luna.memory.storage import db
from luna.memory.storage.store import Store
from luna.scheduler.model import (
    Delivery,
    NewDelivery,
    Run,
    Schedule,
    Target,
    Task,
    TaskKind,
    from_db,
    to_db,
)

LIVE = "('active', 'running')"


class TaskStore:
    """Blocking access to the scheduler tables; one instance per open database."""

    def __init__(self, store: Store) -> None:
        self.db = store

    @contextlib.contextmanager
    def transaction(self) -> Iterator[db.Connection]:
        with self.db.transaction() as conn:
            yield conn

    @contextlib.contextmanager
    def savepoint(self, conn: db.Connection) -> Iterator[None]:
        """One task's changes inside a batch transaction: undone alone when they fail."""
        conn.execute("SAVEPOINT task")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK TO task")
            conn.execute("RELEASE task")
            raise
        conn.execute("RELEASE task")

    # ---- tasks ------------------------------------------------------------------------

    def insert_task(
        self,
        *,
        kind: TaskKind,
        text: str,
        schedule: Schedule,
        next_run: dt.datetime,
        creator: str,
        scope: str,
        target: Target,
        origin_session: str | None,
        now: dt.datetime,
    ) -> Task:
        with self.transaction() as conn:
            cur = conn.execute(
                "INSERT INTO scheduled_tasks (kind, text, schedule_kind, spec, anchor, timezone, "
                "state, next_run_at, creator, scope, frontend, target, origin_session, "
                "created_at, updated_at) "
                "VALUES (?, ?, ?, ?, ?, ?, 'active', ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    kind,
                    text,
                    schedule.kind,
                    schedule.spec,
                    to_db(schedule.anchor) if schedule.anchor else None,
                    schedule.zone,
                    to_db(next_run),
                    creator,
                    scope,
                    target.frontend,
                    target.dumps(),
                    origin_session,
                    to_db(now),
                    to_db(now),
                ),
            )
            task_id = db.inserted_id(cur)
        task = self.get(task_id)
        if task is None:  # pragma: no cover - just written
            raise db.OperationalError("task vanished after insert")
        return task

    def get(self, task_id: int) -> Task | None:
        rows = self.db.query(f"SELECT {Task.COLUMNS} FROM scheduled_tasks WHERE id = ?", (task_id,))
        return Task.from_row(rows[0]) if rows else None

    def list_tasks(
        self, *, creator: str | None = None, live_only: bool = True, limit: int = 200
    ) -> list[Task]:
        """Tasks, live ones by next run first, then the rest newest first."""
        where, params = [], []
        if creator is not None:
            where.append("creator = ?")
            params.append(creator)
        if live_only:
            where.append(f"state IN {LIVE}")
        sql = f"SELECT {Task.COLUMNS} FROM scheduled_tasks"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY state NOT IN {LIVE}, next_run_at IS NULL, next_run_at, id DESC LIMIT ?"
        return [Task.from_row(r) for r in self.db.query(sql, (*params, limit))]

    def count_live(self, creator: str) -> int:
        rows = self.db.query(
            f"SELECT count(*) FROM scheduled_tasks WHERE creator = ? AND state IN {LIVE}",
            (creator,),
        )
        return int(rows[0][0])

    def cancel(self, task_id: int, now: dt.datetime) -> bool:
        with self.transaction() as conn:
            cur = conn.execute(
                "UPDATE scheduled_tasks SET state = 'cancelled', next_run_at = NULL, forced = 0, "
                f"updated_at = ? WHERE id = ? AND state IN {LIVE}",
                (to_db(now), task_id),
            )
            return cur.rowcount > 0

    def force(self, task_id: int, now: dt.datetime) -> bool:
        """Make an active task due now (run-now); False when it is not active."""
        with self.transaction() as conn:
            cur = conn.execute(
                "UPDATE scheduled_tasks SET next_run_at = ?, forced = 1, updated_at = ? "
                "WHERE id = ? AND state = 'active'",
                (to_db(now), to_db(now), task_id),
            )
            return cur.rowcount > 0

    def next_due_at(self) -> dt.datetime | None:
        """When the next active task is due (one index probe)."""
        rows = self.db.query(
            "SELECT next_run_at FROM scheduled_tasks INDEXED BY scheduled_tasks_due "
            "WHERE state = 'active' AND next_run_at IS NOT NULL ORDER BY next_run_at LIMIT 1"
        )
        return from_db(rows[0][0]) if rows else None

    def due(self, now: dt.datetime, limit: int, kinds: tuple[str, ...] | None = None) -> list[Task]:
        """Active tasks due at ``now``, earliest first (an index range scan)."""
        sql = (
            f"SELECT {Task.COLUMNS} FROM scheduled_tasks INDEXED BY scheduled_tasks_due "
            "WHERE state = 'active' AND next_run_at <= ?"
        )
        params: list[Any] = [to_db(now)]
        if kinds is not None:
            sql += f" AND kind IN ({','.join('?' * len(kinds))})"
            params.extend(kinds)
        sql += " ORDER BY next_run_at LIMIT ?"
        return [Task.from_row(r) for r in self.db.query(sql, (*params, limit))]

    def heartbeat(self) -> Task | None:
        rows = self.db.query(
            f"SELECT {Task.COLUMNS} FROM scheduled_tasks WHERE kind = 'heartbeat' "
            f"AND state IN {LIVE}"
        )
        return Task.from_row(rows[0]) if rows else None

    # ---- transitions (inside the caller's transaction) --------------------------------

    @staticmethod
    def move(
        conn: db.Connection,
        task: Task,
        now: dt.datetime,
        *,
        state: str,
        next_run: dt.datetime | None,
        attempt: int = 0,
        ran: str | None = None,
        expect_state: str = "active",
    ) -> bool:
        """Move ``task`` if it is still as the caller saw it; ``ran`` records a run's status."""
        sets = "state = ?, next_run_at = ?, attempt = ?, forced = 0, updated_at = ?"
        params: list[Any] = [state, to_db(next_run) if next_run else None, attempt, to_db(now)]
        if ran is not None:
            sets += ", last_run_at = ?, last_status = ?, runs = runs + 1"
            params += [to_db(now), ran]
        where = "id = ? AND state = ?"
        params += [task.id, expect_state]
        if expect_state == "active":
            where += " AND next_run_at IS ?"
            params.append(to_db(task.next_run_at) if task.next_run_at else None)
        cur = conn.execute(f"UPDATE scheduled_tasks SET {sets} WHERE {where}", params)
        return cur.rowcount > 0

    @staticmethod
    def add_run(
        conn: db.Connection,
        task: Task,
        now: dt.datetime,
        *,
        status: str,
        session_id: str | None = None,
        output: str | None = None,
        error: str | None = None,
    ) -> int:
        due = task.next_run_at or now
        finished = None if status == "running" else to_db(now)
        cur = conn.execute(
            "INSERT INTO task_runs (task_id, due_at, started_at, finished_at, attempt, status, "
            "session_id, output, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (task.id, to_db(due), to_db(now), finished, task.attempt, status, session_id,
             output, error),
        )  # fmt: skip
        return db.inserted_id(cur)

    @staticmethod
    def end_run(
        conn: db.Connection,
        run_id: int,
        now: dt.datetime,
        *,
        status: str,
        output: str | None = None,
        error: str | None = None,
    ) -> None:
        conn.execute(
            "UPDATE task_runs SET status = ?, finished_at = ?, output = ?, error = ? "
            "WHERE id = ? AND status = 'running'",
            (status, to_db(now), output, error, run_id),
        )

    @staticmethod
    def add_delivery(conn: db.Connection, d: NewDelivery, now: dt.datetime) -> int:
        cur = conn.execute(
            "INSERT INTO deliveries (task_id, run_id, kind, frontend, target, session_id, scope, "
            "text, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (d.task_id, d.run_id, d.kind, d.target.frontend, d.target.dumps(), d.session_id,
             d.scope, d.text, to_db(now)),
        )  # fmt: skip
        return db.inserted_id(cur)

    def running(self) -> list[tuple[Run, Task]]:
        """Runs marked running, with their tasks (after a crash: the interrupted ones)."""
        rows = self.db.query(f"SELECT {Run.COLUMNS} FROM task_runs WHERE status = 'running'")
        out = []
        for row in rows:
            run = Run.from_row(row)
            task = self.get(run.task_id)
            if task is not None:
                out.append((run, task))
        return out

    def runs(self, task_id: int, limit: int = 20) -> list[Run]:
        rows = self.db.query(
            f"SELECT {Run.COLUMNS} FROM task_runs WHERE task_id = ? ORDER BY id DESC LIMIT ?",
            (task_id, limit),
        )
        return [Run.from_row(r) for r in rows]

    # ---- deliveries -------------------------------------------------------------------

    def claim_deliveries(
        self, frontend: str, claimant: str, now: dt.datetime, *, stale_s: float, limit: int = 20
    ) -> list[Delivery]:
        """Claim pending deliveries for ``frontend``, oldest first (claims of dead processes
        older than ``stale_s`` are taken over)."""
        stale = to_db(now - dt.timedelta(seconds=stale_s))
        with self.transaction() as conn:
            rows = conn.execute(
                "UPDATE deliveries SET claimed_by = ?, claimed_at = ?, attempts = attempts + 1 "
                "WHERE id IN (SELECT id FROM deliveries INDEXED BY deliveries_pending "
                "WHERE frontend = ? AND delivered_at IS NULL AND failed_at IS NULL "
                "AND (claimed_at IS NULL OR claimed_at < ? OR claimed_by = ?) ORDER BY id LIMIT ?) "
                f"RETURNING {Delivery.COLUMNS}",
                (claimant, to_db(now), frontend, stale, claimant, limit),
            ).fetchall()
        return sorted((Delivery.from_row(r) for r in rows), key=lambda d: d.id)

    def pending_deliveries(self, frontend: str | None = None) -> list[Delivery]:
        sql = (
            f"SELECT {Delivery.COLUMNS} FROM deliveries WHERE delivered_at IS NULL "
            "AND failed_at IS NULL"
        )
        params: tuple[Any, ...] = ()
        if frontend is not None:
            sql += " AND frontend = ?"
            params = (frontend,)
        return [Delivery.from_row(r) for r in self.db.query(sql + " ORDER BY id", params)]

    def mark_noted(self, delivery_id: int, now: dt.datetime) -> None:
        with self.transaction() as conn:
            conn.execute(
                "UPDATE deliveries SET noted_at = ? WHERE id = ? AND noted_at IS NULL",
                (to_db(now), delivery_id),
            )

    def mark_delivered(self, delivery_id: int, now: dt.datetime) -> None:
        with self.transaction() as conn:
            conn.execute(
                "UPDATE deliveries SET delivered_at = ?, claimed_by = NULL WHERE id = ?",
                (to_db(now), delivery_id),
            )

    def release(self, delivery_id: int, now: dt.datetime, *, give_up: bool) -> None:
        """Not shown: free the claim for a later try, or give up on it for good."""
        with self.transaction() as conn:
            conn.execute(
                "UPDATE deliveries SET claimed_by = NULL, claimed_at = NULL, "
                "failed_at = CASE WHEN ? THEN ? ELSE NULL END WHERE id = ?",
                (int(give_up), to_db(now), delivery_id),
            )
