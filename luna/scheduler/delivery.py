"""Delivery: scheduled results reach the front-end, and the session, they were asked from.

Job: :class:`DeliveryRouter` keeps one ``deliver`` function per front-end that is running in
this process (``register("discord", fn)``) and shows the pending rows of the ``deliveries``
table through them. The scheduler writes those rows in the same transaction as the run that
produced them; this router only shows them.

Invariants:
- Stored first, shown second: what no running front-end can show is held in the database and
  shown when one registers (the REPL at its next start) or when another Luna process that
  runs that front-end polls (every ``scheduler.poll_interval``).
- At least once: a delivery is claimed, shown, then marked delivered. A process killed
  between showing and marking shows it again after restart (a window of one send); a claim
  left by a dead process is taken over after ``stale_s``. A front-end that keeps failing is
  given up on after ``max_attempts`` tries, with a log line.
- Before it is shown, the text is appended once (``noted_at``) as an assistant message to the
  session the task was asked from, through ``note`` (the agent, under that session's lock),
  so "what did the 8 o'clock check find?" can be answered there.
- One flush per front-end at a time, in id order; a ``deliver`` exception is logged and
  counts as not shown. Nothing here blocks the loop (SQL runs in a worker thread).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import uuid
from collections.abc import Awaitable, Callable

from luna.errors import LunaError
from luna.observe import log_event
from luna.scheduler.clock import Clock
from luna.scheduler.model import Delivery
from luna.scheduler.store import TaskStore

log = logging.getLogger(__name__)

DeliverFn = Callable[[Delivery], Awaitable[bool]]
NoteFn = Callable[..., Awaitable[object]]  # (session id, text, *, scope)

DEFAULT_STALE_S = 300.0
DEFAULT_MAX_ATTEMPTS = 10
DELIVER_TIMEOUT_S = 120.0


class DeliveryRouter:
    """Shows stored deliveries through the front-ends registered in this process."""

    def __init__(
        self,
        store: TaskStore,
        clock: Clock,
        *,
        note: NoteFn | None = None,
        stale_s: float = DEFAULT_STALE_S,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    ) -> None:
        self.store = store
        self.clock = clock
        self.note = note
        self.stale_s = stale_s
        self.max_attempts = max_attempts
        self.claimant = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._deliver: dict[str, DeliverFn] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[int]] = set()

    @property
    def frontends(self) -> list[str]:
        return list(self._deliver)

    def register(self, frontend: str, deliver: DeliverFn) -> None:
        """Show ``frontend``'s deliveries through ``deliver`` from now on (held ones at once).

        ``deliver(d)`` returns True once ``d.text`` was shown at ``d.target``, False to have
        it tried again later.
        """
        self._deliver[frontend] = deliver
        self.kick(frontend)

    def unregister(self, frontend: str) -> None:
        self._deliver.pop(frontend, None)

    def kick(self, frontend: str | None = None) -> None:
        """Flush soon, in a tracked background task (after a run stored a delivery)."""
        names = [frontend] if frontend is not None else self.frontends
        for name in names:
            if name in self._deliver:
                task = asyncio.get_running_loop().create_task(
                    self.flush(name), name=f"deliveries-{name}"
                )
                self._tasks.add(task)
                task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[int]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("scheduler: delivery flush failed", exc_info=task.exception())

    async def flush(self, frontend: str | None = None) -> int:
        """Show every pending delivery of ``frontend`` (or of all registered); returns how
        many were shown."""
        if frontend is None:
            return sum([await self.flush(name) for name in self.frontends])
        lock = self._locks.setdefault(frontend, asyncio.Lock())
        shown = 0
        async with lock:
            while (deliver := self._deliver.get(frontend)) is not None:
                batch = await asyncio.to_thread(
                    self.store.claim_deliveries,
                    frontend,
                    self.claimant,
                    self.clock.now(),
                    stale_s=self.stale_s,
                )
                if not batch:
                    break
                results = [await self._one(d, deliver) for d in batch]
                shown += sum(results)
                if not all(results):
                    break  # the rest waits for the next poll
        return shown

    async def _one(self, d: Delivery, deliver: DeliverFn) -> bool:
        if d.session_id and not d.noted and self.note is not None:
            try:
                await self.note(d.session_id, d.text, scope=d.scope)
            except LunaError as e:
                log.warning(
                    "scheduler: could not note delivery %s in %s: %s", d.id, d.session_id, e
                )
            else:
                await asyncio.to_thread(self.store.mark_noted, d.id, self.clock.now())
        try:
            ok = bool(await asyncio.wait_for(deliver(d), DELIVER_TIMEOUT_S))
        except asyncio.CancelledError:
            await asyncio.shield(
                asyncio.to_thread(self.store.release, d.id, self.clock.now(), give_up=False)
            )
            raise
        except Exception:  # a front-end bug must not stop the others
            log.exception("scheduler: delivering %s to %s failed", d.id, d.target.frontend)
            ok = False
        now = self.clock.now()
        if ok:
            await asyncio.to_thread(self.store.mark_delivered, d.id, now)
        else:
            give_up = d.attempts >= self.max_attempts
            await asyncio.to_thread(self.store.release, d.id, now, give_up=give_up)
            if give_up:
                log.warning(
                    "scheduler: gave up delivering %s to %s after %s tries",
                    d.id,
                    d.target.frontend,
                    d.attempts,
                )
        log_event(
            "scheduler_delivery",
            delivery=d.id,
            task=d.task_id,
            frontend=d.target.frontend,
            kind=d.kind,
            ok=ok,
            attempt=d.attempts,
        )
        return ok

    async def aclose(self) -> None:
        self._deliver.clear()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.gather(*tasks, return_exceptions=True)
