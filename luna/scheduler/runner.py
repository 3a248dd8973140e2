"""The scheduler's tick: find due tasks, fire them once, run prompts, record what happened.

Invariants (the delivery guarantees; README "Scheduler" repeats them):
- **Reminders: exactly once per due time.** Firing one is a single transaction: the task moves
  to its next time (or done), a run is recorded and the delivery row is written. A crash
  leaves either all of it or none of it; the delivery itself is then shown at least once
  (luna.scheduler.delivery).
- **Prompts and the heartbeat: at most once per due time.** The claim (run row ``running``,
  task ``running``) is committed before the turn starts. A turn that is interrupted (a crash,
  ``kill -9``, a shutdown) is never run again: at the next start it is recorded
  ``interrupted`` and the person is told, because a half-run prompt may have had side effects.
  A turn that *fails* (TurnFailed: the LLM is down, the turn timed out) is retried
  ``scheduler.max_retries`` times with doubling backoff, then marked failed with one notice.
- **Missed periods fire once.** A task due less than ``scheduler.grace`` ago runs once; an
  older one is recorded ``missed``, the person is told once, and a recurring task moves to its
  next time after now, never firing once per missed period (the heartbeat is skipped silently).
- The tick does its SQL in one worker-thread call per batch (``asyncio.to_thread``); the next
  due time is one index probe; at most ``scheduler.max_concurrent`` turns run at once.
- One task's broken row never stops the others: its changes are rolled back to a savepoint and
  it is marked failed, with the traceback in the log.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from luna.config import Config
from luna.observe import log_event
from luna.scheduler.clock import Clock
from luna.scheduler.delivery import DeliveryRouter
from luna.scheduler.execute import (
    RunOutcome,
    TurnExecutor,
    is_silent,
    reminder_text,
    result_text,
    session_of,
)
from luna.scheduler.model import DeliveryKind, NewDelivery, Run, Task
from luna.scheduler.store import TaskStore
from luna.scheduler.timing import count_runs_between, describe, local_text, next_run

log = logging.getLogger(__name__)

BATCH = 200
MAX_BATCHES = 50  # per tick; the next tick goes on at once when this is not enough
PROMPT_KINDS = ("prompt", "heartbeat")
MISSED_COUNT_CAP = 1000


@dataclass
class TickReport:
    fired: int = 0  # reminders delivered
    started: list[tuple[Task, int]] = field(default_factory=list)  # (task, run id) to run
    missed: int = 0
    broken: int = 0
    more: bool = False  # stopped at MAX_BATCHES with work left


class Runner:
    """Due-task processing for one database; one instance holds the scheduler lease."""

    def __init__(
        self,
        cfg: Config,
        store: TaskStore,
        clock: Clock,
        executor: TurnExecutor,
        router: DeliveryRouter,
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.clock = clock
        self.executor = executor
        self.router = router
        self.grace = dt.timedelta(seconds=cfg.scheduler.grace)
        self._turns: dict[int, asyncio.Task[None]] = {}  # task id -> its running turn
        self._user_cancelled: set[int] = set()
        self.accepting = True
        self.on_finish: Callable[[], None] | None = None  # a turn ended: look again

    @property
    def running(self) -> int:
        return len(self._turns)

    # ---- one tick ---------------------------------------------------------------------

    async def tick(self) -> TickReport:
        """Fire everything due now; start the turns it claims (tracked); returns a report."""
        room = 0
        if self.accepting and getattr(self.executor.agent, "accepting", True):
            room = max(0, self.cfg.scheduler.max_concurrent - len(self._turns))
        report = await asyncio.to_thread(self.claim_due, self.clock.now(), room)
        for task, run_id in report.started:
            turn = asyncio.get_running_loop().create_task(
                self._run(task, run_id), name=f"scheduled-{task.id}"
            )
            self._turns[task.id] = turn
            turn.add_done_callback(functools.partial(self._turn_ended, task.id))
        if report.fired or report.missed or report.broken:
            self.router.kick()
        if report.fired or report.started or report.missed:
            log_event(
                "scheduler_tick",
                fired=report.fired,
                started=len(report.started),
                missed=report.missed,
                broken=report.broken,
            )
        return report

    def _turn_ended(self, task_id: int, _turn: asyncio.Task[None]) -> None:
        self._turns.pop(task_id, None)

    def claim_due(self, now: dt.datetime, room: int) -> TickReport:
        """Blocking: fire due reminders, claim up to ``room`` prompts, mark late ones missed."""
        report = TickReport()
        seen: set[int] = set()
        for _ in range(MAX_BATCHES):
            late = [t for t in self.store.due(now - self.grace, BATCH) if not t.forced]
            todo = {t.id: t for t in late}
            for t in self.store.due(now, BATCH, kinds=("reminder",)):
                todo.setdefault(t.id, t)
            free = room - len(report.started)
            if free > 0:
                for t in self.store.due(now, free, kinds=PROMPT_KINDS):
                    todo.setdefault(t.id, t)
            todo = {k: v for k, v in todo.items() if k not in seen}
            if not todo:
                return report
            with self.store.transaction() as conn:
                for task in sorted(todo.values(), key=lambda t: (t.next_run_at, t.id)):
                    seen.add(task.id)
                    try:
                        with self.store.savepoint(conn):
                            self._fire(conn, task, now, report)
                    except Exception:  # one broken task must not stop the rest
                        log.exception("scheduler: task %s could not be processed", task.id)
                        report.broken += 1
                        self._mark_broken(conn, task, now)
        report.more = True
        return report

    def _mark_broken(self, conn: Any, task: Task, now: dt.datetime) -> None:
        try:
            with self.store.savepoint(conn):
                self.store.move(conn, task, now, state="failed", next_run=None, ran="failed")
        except Exception:  # it stays due; the log has both tracebacks
            log.exception("scheduler: task %s could not be marked failed", task.id)

    def _fire(self, conn: Any, task: Task, now: dt.datetime, report: TickReport) -> None:
        due = task.next_run_at or now
        if not task.forced and now - due > self.grace:
            self._missed(conn, task, now, due)
            report.missed += 1
            return
        if task.kind == "reminder":
            nxt = next_run(task.schedule, now) if task.is_recurring else None
            state = "active" if nxt else "done"
            if not self.store.move(conn, task, now, state=state, next_run=nxt, ran="ok"):
                return
            run_id = self.store.add_run(conn, task, now, status="ok", output=task.text)
            self._deliver(conn, task, now, "reminder", reminder_text(task), run_id)
            report.fired += 1
            return
        if not self.store.move(
            conn, task, now, state="running", next_run=None, attempt=task.attempt
        ):
            return
        run_id = self.store.add_run(conn, task, now, status="running", session_id=session_of(task))
        report.started.append((task, run_id))

    def _missed(self, conn: Any, task: Task, now: dt.datetime, due: dt.datetime) -> None:
        nxt = next_run(task.schedule, now) if task.is_recurring else None
        state = "active" if nxt else "missed"
        if not self.store.move(conn, task, now, state=state, next_run=nxt, ran="missed"):
            return
        run_id = self.store.add_run(conn, task, now, status="missed")
        log_event("scheduler_missed", task=task.id, due=due.isoformat(), kind=task.kind)
        if task.kind == "heartbeat":
            return
        zone = task.schedule.zone
        if task.is_recurring:
            n = count_runs_between(task.schedule, due, now, MISSED_COUNT_CAP)
            more = f" and {n - 1} more time{'s' if n > 2 else ''}" if n > 1 else ""
            then = f" Next run {local_text(nxt, zone)}." if nxt else ""
            text = (
                f'⏰ Missed while Luna was not running: task #{task.id} "{task.label}" '
                f"({describe(task.schedule)}) was due {local_text(due, zone)}{more}.{then}"
            )
        else:
            text = (
                f"⏰ Missed while Luna was not running: {task.kind} #{task.id} was due "
                f"{local_text(due, zone)}: {task.text}"
            )
        self._deliver(conn, task, now, "notice", text, run_id)

    def _deliver(
        self,
        conn: Any,
        task: Task,
        now: dt.datetime,
        kind: DeliveryKind,
        text: str,
        run_id: int | None,
    ) -> None:
        session = task.origin_session if task.kind != "heartbeat" else None
        d = NewDelivery(kind, task.target, text, session, task.scope, task.id, run_id)
        self.store.add_delivery(conn, d, now)

    # ---- prompt turns -----------------------------------------------------------------

    async def _run(self, task: Task, run_id: int) -> None:
        log_event("scheduler_run", task=task.id, run=run_id, kind=task.kind, status="started")
        try:
            outcome = await self.executor.run(task)
        except asyncio.CancelledError:
            by_user = task.id in self._user_cancelled
            self._user_cancelled.discard(task.id)
            reason = "cancelled" if by_user else "Luna stopped while it ran"
            await asyncio.shield(asyncio.to_thread(self.interrupted, task, run_id, reason))
            raise
        except Exception as e:  # a bug: the task fails, the daemon lives
            log.exception("scheduler: task %s crashed", task.id)
            outcome = RunOutcome(error=f"internal error ({type(e).__name__})")
        status = await asyncio.to_thread(self.finish, task, run_id, outcome)
        log_event("scheduler_run", task=task.id, run=run_id, kind=task.kind, status=status)
        self.router.kick()
        if self.on_finish is not None:
            self.on_finish()

    def finish(self, task: Task, run_id: int, outcome: RunOutcome) -> str:
        """Blocking: record a finished turn, plan the next time, write its delivery."""
        now = self.clock.now()
        s = self.store
        with s.transaction() as conn:
            if outcome.refused is not None:
                s.end_run(conn, run_id, now, status="refused", error=outcome.refused)
                if s.move(conn, task, now, state="failed", next_run=None, ran="refused",
                          expect_state="running"):  # fmt: skip
                    text = f"⚠️ Task #{task.id} was not run: {outcome.refused}: {task.label}"
                    self._deliver(conn, task, now, "notice", text, run_id)
                return "refused"
            if outcome.error is None:
                silent = task.kind == "heartbeat" and is_silent(outcome.reply)
                status = "silent" if silent else "ok"
                s.end_run(conn, run_id, now, status=status, output=outcome.reply)
                nxt = next_run(task.schedule, now) if task.is_recurring else None
                if s.move(conn, task, now, state="active" if nxt else "done", next_run=nxt,
                          ran=status, expect_state="running") and not silent:  # fmt: skip
                    self._deliver(conn, task, now, "result", result_text(task, outcome), run_id)
                return status
            attempt = task.attempt + 1
            s.end_run(conn, run_id, now, status="failed", error=outcome.error)
            if attempt <= self.cfg.scheduler.max_retries:
                wait = self.cfg.scheduler.retry_backoff * 2 ** (attempt - 1)
                retry = now + dt.timedelta(seconds=wait)
                s.move(conn, task, now, state="active", next_run=retry, attempt=attempt,
                       ran="failed", expect_state="running")  # fmt: skip
                return "failed"
            nxt = next_run(task.schedule, now) if task.is_recurring else None
            if s.move(conn, task, now, state="active" if nxt else "failed", next_run=nxt,
                      ran="failed", expect_state="running"):  # fmt: skip
                then = (
                    f" Next run {local_text(nxt, task.schedule.zone)}."
                    if nxt
                    else " It is marked failed."
                )
                text = (
                    f"⚠️ Task #{task.id} ({task.label}) failed {attempt} times; last error: "
                    f"{_one_line(outcome.error)}.{then}"
                )
                self._deliver(conn, task, now, "notice", text, run_id)
            return "failed"

    def interrupted(self, task: Task, run_id: int, reason: str) -> None:
        """Blocking: a claimed turn that did not finish. Never run again (at most once)."""
        now = self.clock.now()
        status = "cancelled" if reason == "cancelled" else "interrupted"
        with self.store.transaction() as conn:
            self.store.end_run(conn, run_id, now, status=status, error=reason)
            nxt = next_run(task.schedule, now) if task.is_recurring else None
            moved = self.store.move(conn, task, now, state="active" if nxt else "failed",
                                    next_run=nxt, ran=status, expect_state="running")  # fmt: skip
            if moved and status == "interrupted" and task.kind != "heartbeat":
                then = f" Next run {local_text(nxt, task.schedule.zone)}." if nxt else ""
                text = (
                    f"⚠️ Task #{task.id} ({task.label}) was interrupted ({reason}) and was not "
                    f"run again: a scheduled prompt runs at most once per due time.{then}"
                )
                self._deliver(conn, task, now, "notice", text, run_id)

    def recover(self) -> list[Run]:
        """Blocking, at lease time: every run still ``running`` belonged to a Luna that is gone."""
        found = self.store.running()
        for run, task in found:
            log.warning("scheduler: task %s run %s was interrupted by a restart", task.id, run.id)
            self.interrupted(task, run.id, "Luna stopped while it ran")
        return [run for run, _ in found]

    async def wait_idle(self) -> None:
        """Until no scheduled turn runs (the ones started meanwhile included)."""
        while self._turns:
            await asyncio.wait(list(self._turns.values()))

    def cancel_turn(self, task_id: int) -> None:
        """The task was cancelled: stop its running turn, if this process runs it."""
        turn = self._turns.get(task_id)
        if turn is not None and not turn.done():
            self._user_cancelled.add(task_id)
            turn.cancel()

    async def aclose(self, deadline: float) -> None:
        """Start no more turns; give running ones ``deadline`` seconds, then cancel them."""
        self.accepting = False
        turns = list(self._turns.values())
        if not turns:
            return
        _, pending = await asyncio.wait(turns, timeout=deadline)
        for turn in pending:
            turn.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


def _one_line(text: str, limit: int = 200) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"
