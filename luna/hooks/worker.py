"""Running webhook events: each accepted event becomes one turn, its result a delivery.

Invariants:
- Every event's turn runs in a tracked task (:meth:`HookWorker.wait` waits for them, then
  cancels what is left); none belongs to the HTTP request that brought the event.
- Events of one session run one at a time, in the order they were accepted. An event waiting
  for its session is still ``pending`` in the database, so a stop leaves it to the next start;
  one whose turn began is ``running`` (``luna.hooks.store``: at most once).
- The turn is the owner's (scope ``owner``) and unattended: no approver, so ``ask`` tools are
  denied (the result names them); tool levels are those of the front-end the result goes to,
  as for scheduled prompts; ``tools = false`` offers none.
- A reply that is empty or "nothing to report" is recorded ``silent`` and not delivered; any
  other reply, a failed turn and an interrupted one are delivered to the hook's target through
  the scheduler's delivery router (stored first, shown when that front-end runs).
- At start, events left ``running`` become ``interrupted`` (with a notice) and pending ones run.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from typing import TYPE_CHECKING

from luna.config import Config
from luna.hooks.prompt import render
from luna.hooks.store import HookEvent, HookStore
from luna.hooks.target import hook_target
from luna.messages import Frontend, InboundMessage, ToolStarted, TurnDone, TurnFailed
from luna.observe import log_event
from luna.scheduler.delivery import DeliveryRouter
from luna.scheduler.execute import asked_tools, denied_note, is_silent
from luna.scheduler.model import DeliveryKind, NewDelivery, Target
from luna.tasks import finish_or_cancel
from luna.tools.registry import ToolRegistry

if TYPE_CHECKING:  # the running parts are handed in; only their types here
    from luna.agent import Agent

log = logging.getLogger(__name__)

MARK = "🪝"


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _frontend(target: Target) -> Frontend:
    """The front-end whose tool levels the turn gets: the one its result goes to."""
    chat: dict[str, Frontend] = {"discord": "discord", "telegram": "telegram", "repl": "repl"}
    return chat.get(target.frontend, "web")


class HookWorker:
    """Runs the turns of accepted webhook events; see the module docstring."""

    def __init__(
        self,
        cfg: Config,
        agent: Agent,
        registry: ToolRegistry,
        store: HookStore,
        router: DeliveryRouter | None,
    ) -> None:
        self.cfg = cfg
        self.agent = agent
        self.registry = registry
        self.store = store
        self.router = router
        self.is_accepting = True
        self._tasks: set[asyncio.Task[None]] = set()
        self._sessions: dict[str, asyncio.Lock] = {}

    async def start(self) -> None:
        """Settle what a previous process left: interrupted events told, pending ones run."""
        now = _now()
        cut = await asyncio.to_thread(self.store.recover, now, self._interrupted)
        pruned = await asyncio.to_thread(self.store.prune, now)
        pending = await asyncio.to_thread(self.store.pending)
        for event in pending:
            self.submit(event)
        if cut or pending or pruned:
            log_event("hooks_start", interrupted=len(cut), pending=len(pending), pruned=pruned)
        for frontend in {self._target_of(e.hook)[0] for e in cut}:
            self._kick(frontend)

    def submit(self, event: HookEvent) -> None:
        """Run ``event`` in a tracked task (after the sessions's earlier events)."""
        task = asyncio.get_running_loop().create_task(
            self._run(event), name=f"hook-{event.hook}-{event.id}"
        )
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def stop(self) -> None:
        """Start no more turns; events not begun stay pending for the next start."""
        self.is_accepting = False

    async def wait(self, deadline: float) -> None:
        """Wait up to ``deadline`` seconds for running turns, then cancel what is left."""
        await finish_or_cancel(self._tasks, deadline)

    # ---- one event --------------------------------------------------------------------

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("hooks: an event's run failed", exc_info=task.exception())

    def _is_open(self) -> bool:
        return self.is_accepting and bool(getattr(self.agent, "accepting", True))

    async def _run(self, event: HookEvent) -> None:
        lock = self._sessions.setdefault(event.session_id, asyncio.Lock())
        async with lock:
            if not self._is_open():
                return  # still pending: the next start runs it
            if not await asyncio.to_thread(self.store.claim, event.id, _now()):
                return
            if not self._is_open():  # shutdown began during the claim: nothing ran yet
                await asyncio.to_thread(self.store.unclaim, event.id)
                return
            await self._turn(event)

    def _target_of(self, name: str) -> tuple[str, Target | None, str | None]:
        hook = self.cfg.hooks.get(name)
        if hook is None:
            return "", None, f"there is no hook {name} in the configuration any more"
        target, problem = hook_target(self.cfg, name, hook)
        return (target.frontend if target else ""), target, problem

    async def _turn(self, event: HookEvent) -> None:
        _, target, problem = self._target_of(event.hook)
        hook = self.cfg.hooks.get(event.hook)
        if target is None or hook is None:
            log.warning("hooks: event %s of %s not run: %s", event.id, event.hook, problem)
            await self._finish(event, "failed", error=problem)
            return
        frontend = _frontend(target)
        msg = InboundMessage(
            session_id=event.session_id,
            text=render(event.hook, hook, event.body, event.received_at),
            frontend=frontend,
            user_id="owner",
            scope="owner",
            allow_tools=hook.tools,
            approver=None,
            address=dict(target.address) or None,
        )
        reply, error, wanted = "", None, []
        try:
            async for item in self.agent.run_turn(msg):
                if isinstance(item, ToolStarted):
                    wanted.append(item.name)
                elif isinstance(item, TurnDone):
                    reply = item.reply
                elif isinstance(item, TurnFailed):
                    error = item.message
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return  # the agent's drain cut the turn: interrupted, told at the next start
        denied = asked_tools(self.registry, wanted, frontend)
        if error is not None:
            text = f"{MARK} {event.hook}: event #{event.id} failed: {error}"
            await self._finish(event, "failed", error=error, text=text, target=target)
        elif is_silent(reply) and not denied:
            await self._finish(event, "silent", reply=reply)
        else:
            body = reply.strip() or "(no answer)"
            text = f"{MARK} {event.hook}: {body}{denied_note(denied, 'webhook run')}"
            await self._finish(event, "done", reply=reply, text=text, target=target)

    async def _finish(
        self,
        event: HookEvent,
        state: str,
        *,
        reply: str | None = None,
        error: str | None = None,
        text: str | None = None,
        target: Target | None = None,
    ) -> None:
        delivery = None
        if text is not None and target is not None:
            kind: DeliveryKind = "result" if state == "done" else "notice"
            delivery = NewDelivery(kind, target, text, session_id=None, scope="owner")
        await asyncio.to_thread(
            self.store.finish, event.id, _now(), state=state, reply=reply, error=error,
            delivery=delivery,
        )  # fmt: skip
        log_event("hook_event", hook=event.hook, event_id=event.id, state=state)
        if delivery is not None:
            self._kick(delivery.target.frontend)

    def _interrupted(self, event: HookEvent) -> NewDelivery | None:
        _, target, _ = self._target_of(event.hook)
        if target is None:
            return None
        text = (
            f"{MARK} {event.hook}: event #{event.id} (received "
            f"{event.received_at:%Y-%m-%d %H:%M} UTC) was cut off when Luna stopped and was "
            "not run again: it may have acted already. Send it again if it should run."
        )
        return NewDelivery("notice", target, text, session_id=None, scope="owner")

    def _kick(self, frontend: str) -> None:
        if self.router is not None and frontend:
            self.router.kick(frontend)
