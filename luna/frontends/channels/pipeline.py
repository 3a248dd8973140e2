"""The chat message pipeline: drop replays, merge bursts, run one turn per session at a time.

Job: sit between an app's incoming messages and the turn runner. A message goes through
:meth:`admit` (duplicate check) and :meth:`submit`; the pipeline calls ``handler(batch)`` once
per turn.

Invariants:
- A message id is admitted once; a replayed or duplicated event is refused (bounded memory:
  the most recent ``max_seen`` ids are remembered).
- Consecutive messages from the same author in the same session that arrive within
  ``burst_window`` seconds of the previous one form one batch (one turn). A burst is closed
  after ``burst_window`` of quiet, or at the latest after ``max_burst`` messages.
- Batches of one session run strictly one after another in arrival order; different sessions
  run concurrently. Each session's worker task exits when its queue is empty.
- A handler exception is logged and never stops the session's worker; CancelledError is never
  swallowed. :meth:`aclose` cancels every task the pipeline started.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from luna.observe import log_event

log = logging.getLogger(__name__)

DEFAULT_MAX_SEEN = 2048
DEFAULT_MAX_BURST = 10


@dataclass
class Incoming:
    """One accepted message: routing already decided, payload opaque to the pipeline."""

    message_id: Hashable
    session_id: str
    author_id: Hashable
    payload: Any  # the channel's own record; the pipeline never reads it


@dataclass
class Batch:
    """One turn's worth of messages (a burst), all from one author in one session."""

    session_id: str
    author_id: Hashable
    items: list[Incoming] = field(default_factory=list)


Handler = Callable[[Batch], Awaitable[None]]


class SessionPipeline:
    """Dedupe, burst merging and per-session serial execution."""

    def __init__(
        self,
        handler: Handler,
        *,
        burst_window: float,
        max_seen: int = DEFAULT_MAX_SEEN,
        max_burst: int = DEFAULT_MAX_BURST,
    ) -> None:
        self._handler = handler
        self._window = max(0.0, burst_window)
        self._max_seen = max_seen
        self._max_burst = max_burst
        self._seen: OrderedDict[Hashable, None] = OrderedDict()
        self._open: dict[str, Batch] = {}  # session -> burst still collecting
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._queues: dict[str, asyncio.Queue[Batch]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}

    def admit(self, message_id: Hashable) -> bool:
        """True the first time ``message_id`` is offered (and remember it); False for a repeat."""
        if message_id in self._seen:
            self._seen.move_to_end(message_id)
            return False
        self._seen[message_id] = None
        while len(self._seen) > self._max_seen:
            self._seen.popitem(last=False)
        return True

    def submit(self, item: Incoming) -> None:
        """Add a message to its session's current burst (or start a new one)."""
        sid = item.session_id
        batch = self._open.get(sid)
        if batch is not None and batch.author_id != item.author_id:
            self._close_burst(sid)
            batch = None
        if batch is None:
            batch = Batch(session_id=sid, author_id=item.author_id)
            self._open[sid] = batch
        batch.items.append(item)
        timer = self._timers.pop(sid, None)
        if timer is not None:
            timer.cancel()
        if self._window <= 0 or len(batch.items) >= self._max_burst:
            self._close_burst(sid)
        else:
            loop = asyncio.get_running_loop()
            self._timers[sid] = loop.call_later(self._window, self._close_burst, sid)

    def _close_burst(self, sid: str) -> None:
        timer = self._timers.pop(sid, None)
        if timer is not None:
            timer.cancel()
        batch = self._open.pop(sid, None)
        if batch is None:
            return
        queue = self._queues.setdefault(sid, asyncio.Queue())
        queue.put_nowait(batch)
        worker = self._workers.get(sid)
        if worker is None or worker.done():
            self._workers[sid] = asyncio.get_running_loop().create_task(
                self._work(sid, queue), name=f"channel-session-{sid}"
            )

    async def _work(self, sid: str, queue: asyncio.Queue[Batch]) -> None:
        try:
            while not queue.empty():
                batch = queue.get_nowait()
                try:
                    await self._handler(batch)
                except Exception as e:  # a bad turn must not stop the session
                    log.exception("channel turn handler failed for %s", sid)
                    log_event("channel_error", op="turn", session=sid, error=type(e).__name__)
        finally:
            if self._workers.get(sid) is asyncio.current_task():
                del self._workers[sid]
                if queue.empty():
                    self._queues.pop(sid, None)

    async def aclose(self) -> None:
        """Cancel pending bursts and running turns."""
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self._open.clear()
        tasks = list(self._workers.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        self._workers.clear()
        self._queues.clear()
