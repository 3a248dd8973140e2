"""The scheduler's clock: real time in production, a hand-moved one in tests and benchmarks.

Invariants:
- ``now()`` is an aware UTC datetime; nothing in the scheduler reads the time another way.
- ``sleep_until(when, wake)`` returns once the clock reads ``when`` or as soon as ``wake`` is
  set, whichever comes first; it never blocks the event loop. The deadline is absolute, so
  time that passes between computing it and sleeping is never added twice.
- :class:`ManualClock` moves only when told (``advance``/``set``), and a sleeper wakes when
  the time it waits for is reached, so tests never wait for real minutes.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
from typing import Protocol


class Clock(Protocol):
    def now(self) -> dt.datetime: ...

    async def sleep_until(self, when: dt.datetime, wake: asyncio.Event) -> None: ...


class SystemClock:
    def now(self) -> dt.datetime:
        return dt.datetime.now(dt.UTC)

    async def sleep_until(self, when: dt.datetime, wake: asyncio.Event) -> None:
        seconds = (when - self.now()).total_seconds()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(wake.wait(), max(0.0, seconds))


class ManualClock:
    """A clock that stands still until moved."""

    def __init__(self, start: dt.datetime) -> None:
        self._now = start.astimezone(dt.UTC)
        self._sleepers: set[asyncio.Event] = set()

    def now(self) -> dt.datetime:
        return self._now

    def set(self, when: dt.datetime) -> None:
        self._now = when.astimezone(dt.UTC)
        for moved in self._sleepers:
            moved.set()

    def advance(self, seconds: float) -> None:
        self.set(self._now + dt.timedelta(seconds=seconds))

    async def sleep_until(self, when: dt.datetime, wake: asyncio.Event) -> None:
        until = when.astimezone(dt.UTC)
        moved = asyncio.Event()
        self._sleepers.add(moved)
        try:
            while self._now < until and not wake.is_set():
                moved.clear()
                waiters = {asyncio.ensure_future(moved.wait()), asyncio.ensure_future(wake.wait())}
                try:
                    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for w in waiters:
                        w.cancel()
        finally:
            self._sleepers.discard(moved)
