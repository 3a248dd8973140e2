"""Stopping a group of running tasks within a deadline: the one rule every shutdown follows.

Invariants: the tasks get ``deadline`` seconds to finish on their own; the ones still running
are cancelled and given ``settle`` more seconds to unwind; nothing here raises what a task
raised. Imports no other Luna module.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

SETTLE_S = 5.0  # how long cancelled tasks get to run their cleanup


async def finish_or_cancel(
    tasks: Iterable[asyncio.Task[object]], deadline: float, settle: float = SETTLE_S
) -> set[asyncio.Task[object]]:
    """Wait up to ``deadline`` seconds for ``tasks``, then cancel the rest; returns those."""
    running = set(tasks)
    if not running:
        return set()
    _, late = await asyncio.wait(running, timeout=deadline)
    for task in late:
        task.cancel()
    if late:
        with contextlib.suppress(Exception):
            await asyncio.wait(late, timeout=settle)
    return late
