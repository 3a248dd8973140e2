"""The running scheduler: the lease, the loop, the heartbeat, and the parts front-ends use.

Job: :class:`SchedulerService` is built by ``app`` after the agent. It exposes ``api``
(:class:`~luna.scheduler.api.Schedules`) and ``router``
(:class:`~luna.scheduler.delivery.DeliveryRouter`), binds the API for the model's tools
(``registry.scheduler``) and runs one background loop.

Invariants:
- One scheduler per database: only the process holding ``<data>/scheduler.lock`` (an
  ``flock``, released by the kernel when the process dies, ``kill -9`` included) fires
  tasks. Only one Luna runs per data folder (``luna.datafolder``), but ``luna schedule``
  commands still add and change tasks beside it; the lease keeps the firing in one place.
- On taking the lease, runs left ``running`` by a dead holder are recorded interrupted (never
  rerun) and the heartbeat task is made to match the configuration.
- The loop sleeps until the next due time or ``scheduler.poll_interval``, whichever is
  sooner, and wakes at once when this process adds, changes or finishes a task.
- ``stop`` runs in reverse: no new turns, running ones get the grace, then the loop, the
  router and the lease go.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import fcntl
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from luna.config import Config
from luna.observe import log_event
from luna.scheduler.api import Schedules
from luna.scheduler.clock import Clock, SystemClock
from luna.scheduler.delivery import DeliveryRouter
from luna.scheduler.execute import TurnExecutor
from luna.scheduler.heartbeat import check_heartbeat, heartbeat_schedule
from luna.scheduler.model import OWNER, Schedule, owner_target
from luna.scheduler.runner import Runner, TickReport
from luna.scheduler.store import TaskStore
from luna.scheduler.timing import next_run
from luna.scheduler.tool_port import ToolPort
from luna.tools.registry import ToolRegistry

if TYPE_CHECKING:  # built before the scheduler and handed in; only their types here
    from luna.agent import Agent
    from luna.memory import Memory

log = logging.getLogger(__name__)

LOCK_NAME = "scheduler.lock"


class Lease:
    """An exclusive, non-blocking ``flock`` on one file; the kernel frees it with the process."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            return True
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)


class SchedulerService:
    """The scheduler of one Luna process (see the module invariants)."""

    def __init__(
        self,
        cfg: Config,
        memory: Memory,
        agent: Agent,
        registry: ToolRegistry,
        clock: Clock | None = None,
    ) -> None:
        self.cfg = cfg
        self.clock = clock or SystemClock()
        self.store = TaskStore(memory.store)
        self.registry = registry
        self.router = DeliveryRouter(self.store, self.clock, note=agent.add_note)
        self.runner = Runner(
            cfg, self.store, self.clock, TurnExecutor(cfg, agent, registry), self.router
        )
        self.api = Schedules(
            cfg, self.store, self.clock, on_change=self.wake, on_cancel=self.runner.cancel_turn
        )
        self.lease = Lease(cfg.data_dir / LOCK_NAME)
        self._wake = asyncio.Event()
        self._loop: asyncio.Task[None] | None = None

    # ---- lifecycle --------------------------------------------------------------------

    async def start(self) -> None:
        """Bind the tools' API, take the lease if free, start the loop; returns at once."""
        # A heartbeat that cannot work stops Luna here (``luna config set`` asks the same).
        check_heartbeat(self.cfg, self.clock.now())
        self.registry.scheduler = ToolPort(self.api)
        await self._take_lease()
        self._loop = asyncio.create_task(self._run(), name="scheduler")

    async def stop(self, grace: float | None = None) -> None:
        self.registry.scheduler = None
        await self.runner.aclose(self.cfg.agent.shutdown_grace if grace is None else grace)
        if self._loop is not None:
            self._loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop
            self._loop = None
        await self.router.aclose()
        self.lease.release()

    def wake(self) -> None:
        self._wake.set()

    async def tick_once(self, *, settle: bool = True) -> TickReport | None:
        """One pass of the loop without its sleep (tests, benchmarks): take the lease if
        free, fire what is due, let the turns it started finish (``settle``), deliver."""
        report = None
        if await self._take_lease():
            report = await self.runner.tick()
            if settle:
                await self.runner.wait_idle()
        await self.router.flush()
        return report

    # ---- the loop ---------------------------------------------------------------------

    async def _take_lease(self) -> bool:
        if self.lease.held or not self.lease.try_acquire():
            return self.lease.held
        recovered = await asyncio.to_thread(self.runner.recover)
        await asyncio.to_thread(self._sync_heartbeat)
        log_event("scheduler_lease", pid=os.getpid(), interrupted=len(recovered))
        return True

    async def _run(self) -> None:
        poll = dt.timedelta(seconds=self.cfg.scheduler.poll_interval)
        self.runner.on_finish = self.wake
        while True:
            self._wake.clear()
            now = self.clock.now()
            until = now + poll
            try:
                if await self._take_lease():
                    report = await self.runner.tick()
                    progressed = report.fired or report.started or report.missed
                    nxt = await asyncio.to_thread(self.store.next_due_at)
                    if report.more:
                        until = now
                    elif nxt is not None and (nxt > now or progressed):
                        # (Due but not started, all turn slots busy: a finishing turn wakes us.)
                        until = min(until, max(nxt, now))
                await self.router.flush()
            except Exception:  # the loop must outlive one bad tick
                log.exception("scheduler: tick failed; trying again in %s", poll)
            await self.clock.sleep_until(until, self._wake)

    # ---- the heartbeat ----------------------------------------------------------------

    def _heartbeat_schedule(self) -> Schedule:
        return heartbeat_schedule(self.cfg, self.clock.now())

    def _sync_heartbeat(self) -> None:
        """Blocking: make the one heartbeat task match the configuration."""
        sched = self.cfg.scheduler
        now = self.clock.now()
        current = self.store.heartbeat()
        wanted = None
        if sched.heartbeat:
            wanted = (self._heartbeat_schedule(), owner_target(self.cfg, sched.heartbeat_to))
            if current is not None and (
                (current.schedule.spec, current.schedule.zone, current.text, current.target)
                == (wanted[0].spec, wanted[0].zone, sched.heartbeat_prompt, wanted[1])
            ):
                return
        if current is not None:
            self.store.cancel(current.id, now)
        if wanted is None:
            return
        schedule, target = wanted
        first = next_run(schedule, now) or now + dt.timedelta(days=1)
        self.store.insert_task(
            kind="heartbeat",
            text=sched.heartbeat_prompt,
            schedule=schedule,
            next_run=first,
            creator=OWNER,
            scope="owner",
            target=target,
            origin_session=None,
            now=now,
        )
        log_event("scheduler_heartbeat", cron=schedule.spec, frontend=target.frontend)
