"""The scheduler's public API: add, list, get, cancel, run-now, runs.

Job: :class:`Schedules` is the one code path behind the model's tools, ``luna schedule`` and
the web front-end. It checks who asks (``rights``), what they typed (``timing``), the
per-person cap, and writes through ``TaskStore``.

Invariants:
- Every refusal is a ScheduleError with one line for the person (or the model) who asked.
- The owner sees and may change every task; anyone else only the tasks they created.
- Text is kept as given (any script, emoji) minus control characters other than newline and
  tab, and at most ``scheduler.max_text_chars`` long.
- A change made here wakes this process's scheduler (``on_change``); another process notices
  it within ``scheduler.poll_interval``.
"""

from __future__ import annotations

import asyncio
import builtins  # `list` in an annotation inside Schedules is its method
import contextlib
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

from luna.config import Config
from luna.config.timezone import zone_for
from luna.errors import NoSuchTaskError, ScheduleError
from luna.ids import parse_id
from luna.scheduler import rights, timing
from luna.scheduler.clock import Clock, SystemClock
from luna.scheduler.heartbeat import limits_of
from luna.scheduler.model import Requester, Run, Target, Task, TaskRequest, owner_target, to_db
from luna.scheduler.store import TaskStore

_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def clean_task_text(text: str, max_chars: int) -> str:
    cleaned = _CONTROL.sub("", text).strip()
    if not cleaned:
        raise ScheduleError("say what to remind you of or what to do (the text is empty)")
    if len(cleaned) > max_chars:
        raise ScheduleError(
            f"the text is {len(cleaned)} characters; the most is {max_chars} "
            "(scheduler.max_text_chars)"
        )
    return cleaned


def task_json(task: Task) -> dict[str, Any]:
    """A task as ``luna schedule list --json`` prints it and the web API returns it."""
    nxt = task.next_run_at
    return {
        "id": task.id,
        "kind": task.kind,
        "text": task.text,
        "state": task.state,
        "schedule": timing.describe(task.schedule),
        "schedule_kind": task.schedule.kind,
        "spec": task.schedule.spec,
        "timezone": task.schedule.zone,
        "next_run": to_db(nxt) if nxt else None,
        "next_run_local": timing.local_text(nxt, task.schedule.zone) if nxt else None,
        "creator": task.creator,
        "target": task.target.to_json(),
        "origin_session": task.origin_session,
        "created_at": to_db(task.created_at),
        "last_run_at": to_db(task.last_run_at) if task.last_run_at else None,
        "last_status": task.last_status,
        "runs": task.runs,
        "attempt": task.attempt,
    }


def task_line(task: Task) -> str:
    """One line for people: ``#3 reminder [active] next 2026-12-02 09:00 CET (once …): text``."""
    nxt = task.next_run_at
    when = f"next {timing.local_text(nxt, task.schedule.zone)}" if nxt else "no next run"
    return (
        f"#{task.id} {task.kind} [{task.state}] {when} ({timing.describe(task.schedule)}): "
        f"{task.label}"
    )


class Schedules:
    """Scheduler operations on behalf of a :class:`Requester` (see module invariants)."""

    def __init__(
        self,
        cfg: Config,
        store: TaskStore,
        clock: Clock | None = None,
        *,
        on_change: Callable[[], None] | None = None,
        on_cancel: Callable[[int], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.store = store
        self.clock = clock or SystemClock()
        self.on_change = on_change
        self.on_cancel = on_cancel

    async def add(self, req: TaskRequest, who: Requester) -> Task:
        """Schedule ``req`` for ``who``; returns the stored task."""
        cfg = self.cfg.scheduler
        role = rights.role_of(self.cfg, who.user_id)
        if req.kind not in ("reminder", "prompt"):
            raise ScheduleError(f"kind must be 'reminder' or 'prompt', not {req.kind!r}")
        refusal = rights.may_schedule(self.cfg, role, req.kind)
        if refusal:
            raise ScheduleError(refusal)
        text = clean_task_text(req.text, cfg.max_text_chars)
        creator = rights.creator_id(self.cfg, who.user_id)
        cap = rights.cap_for(self.cfg, role)
        live = await asyncio.to_thread(self.store.count_live, creator)
        if live >= cap:
            raise ScheduleError(
                f"you have {live} active tasks, the most allowed; cancel one first "
                "(scheduler.max_tasks_per_user)"
            )
        now = self.clock.now()
        zone = zone_for(self.cfg.agent.timezone)
        schedule, first = timing.build_schedule(req, zone, now, limits_of(self.cfg))
        target = who.target or self._default_target(who)
        task = await asyncio.to_thread(
            lambda: self.store.insert_task(
                kind=req.kind,
                text=text,
                schedule=schedule,
                next_run=first,
                creator=creator,
                scope=who.scope,
                target=target,
                origin_session=who.session_id,
                now=now,
            )
        )
        self._changed()
        return task

    def _default_target(self, who: Requester) -> Target:
        if who.frontend in ("repl", "web"):
            return Target(who.frontend)
        if who.frontend == "cli" and rights.role_of(self.cfg, who.user_id) == "owner":
            return owner_target(self.cfg)
        raise ScheduleError(f"there is no way to deliver to {who.frontend!r}")

    async def list(
        self, who: Requester, *, include_finished: bool = False, limit: int = 200
    ) -> list[Task]:
        creator = self._visible_creator(who)
        return await asyncio.to_thread(
            lambda: self.store.list_tasks(
                creator=creator, live_only=not include_finished, limit=limit
            )
        )

    async def get(self, task_id: int, who: Requester) -> Task:
        """The task ``task_id`` if ``who`` may see it, else NoSuchTaskError (an id no task
        can have, from the model or anyone, included: ``luna.ids``)."""
        if parse_id(task_id) is None:
            raise NoSuchTaskError(task_id)
        task = await asyncio.to_thread(self.store.get, task_id)
        creator = self._visible_creator(who)
        if task is None or (creator is not None and task.creator != creator):
            raise NoSuchTaskError(task_id)
        return task

    async def cancel(self, task_id: int, who: Requester) -> Task:
        task = await self.get(task_id, who)
        if task.kind == "heartbeat":
            raise ScheduleError("the heartbeat is set in config.toml (scheduler.heartbeat)")
        if not await asyncio.to_thread(self.store.cancel, task_id, self.clock.now()):
            raise ScheduleError(f"task #{task_id} is already {task.state}")
        if self.on_cancel is not None:
            self.on_cancel(task_id)
        self._changed()
        return await self.get(task_id, who)

    async def run_now(self, task_id: int, who: Requester) -> Task:
        """Make a task due now; the scheduler fires it at its next tick (at once in this
        process, within ``scheduler.poll_interval`` from another)."""
        task = await self.get(task_id, who)
        if not await asyncio.to_thread(self.store.force, task_id, self.clock.now()):
            state = "running already" if task.state == "running" else task.state
            raise ScheduleError(f"task #{task_id} is {state}; only an active task can run now")
        self._changed()
        return await self.get(task_id, who)

    async def runs(self, task_id: int, who: Requester, *, limit: int = 20) -> builtins.list[Run]:
        await self.get(task_id, who)
        return await asyncio.to_thread(self.store.runs, task_id, limit)

    def _visible_creator(self, who: Requester) -> str | None:
        """None (every task) for the owner, else the person's own creator id."""
        if rights.role_of(self.cfg, who.user_id) == "owner":
            return None
        return rights.creator_id(self.cfg, who.user_id)

    def _changed(self) -> None:
        if self.on_change is not None:
            self.on_change()


@contextlib.asynccontextmanager
async def open_schedules(cfg: Config) -> AsyncIterator[Schedules]:
    """The API over its own connection to the database, for one command (the CLI)."""
    from luna.memory.storage.store import Store

    store = await asyncio.to_thread(Store, cfg.memory.db_path, load_vec=False)
    try:
        await asyncio.to_thread(store.migrate)
        yield Schedules(cfg, TaskStore(store))
    finally:
        await asyncio.to_thread(store.close)
