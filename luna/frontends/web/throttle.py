"""How many guesses at the token one source gets: a bucket per source, taken before comparing.

Job: :class:`Throttle` holds, per source (see :mod:`luna.frontends.web.peers`), a bucket of
``MAX_FAILURES`` attempts that refills at ``MAX_FAILURES`` a minute. Every request that offers
a token (a bearer header or ``POST /login``) takes one attempt *before* the token is compared.
The same buckets, of another size, limit webhook signatures per source and events per hook
(:mod:`luna.frontends.web.hooks_api`).

Invariants:
- ``take`` is synchronous and comes before anything awaits, so concurrent guesses can never
  all be compared: at most ``MAX_FAILURES`` in a burst per source, then one every
  ``REFILL_S`` seconds; the rest are answered 429 without a comparison.
- The right token costs nothing (``refund``), and a browser login is never throttled: the owner
  behind a neighbour who guesses waits at most ``REFILL_S`` seconds, unless that neighbour is
  guessing from the same source at that same moment. Only per-client sources prevent that
  (``web.trusted_proxies`` behind a reverse proxy), so one source's failures never lock out
  another's.
- Memory is bounded: past ``MAX_SOURCES`` sources, those with a full bucket (nothing to
  remember) go first, then the longest idle.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

MAX_FAILURES = 20  # a burst per source; then this many a minute
WINDOW_S = 60.0
REFILL_S = WINDOW_S / MAX_FAILURES
MAX_SOURCES = 10_000


class Throttle:
    """Attempt buckets per source; see the module docstring."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        *,
        capacity: int = MAX_FAILURES,
        window_s: float = WINDOW_S,
    ) -> None:
        self._clock = clock
        self.capacity = float(capacity)  # a burst; then ``capacity`` per ``window_s``
        self.refill_s = window_s / capacity
        self._buckets: dict[str, tuple[float, float]] = {}  # source -> (attempts left, at)

    def _level(self, source: str, now: float) -> float:
        left, at = self._buckets.get(source, (self.capacity, now))
        return min(self.capacity, left + (now - at) / self.refill_s)

    def take(self, source: str) -> bool:
        """Spend one attempt of ``source``; False (spend nothing) when none is left."""
        now = self._clock()
        left = self._level(source, now)
        if left < 1:
            return False
        if source not in self._buckets and len(self._buckets) >= MAX_SOURCES:
            self._prune(now)
        self._buckets[source] = (left - 1, now)
        return True

    def refund(self, source: str) -> None:
        """Give back the attempt the right token took."""
        now = self._clock()
        self._buckets[source] = (min(self.capacity, self._level(source, now) + 1), now)

    def retry_after(self, source: str) -> int:
        """Whole seconds until ``source`` has an attempt again (at least 1)."""
        missing = 1 - self._level(source, self._clock())
        return max(1, math.ceil(missing * self.refill_s))

    def _prune(self, now: float) -> None:
        full = [s for s in self._buckets if self._level(s, now) >= self.capacity]
        for source in full:
            del self._buckets[source]
        if len(self._buckets) >= MAX_SOURCES:
            idle = sorted(self._buckets, key=lambda s: self._buckets[s][1])
            for source in idle[: len(idle) // 2]:
                del self._buckets[source]
