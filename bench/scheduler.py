"""Scheduler at scale: next-due lookup and tick cost with 10,000 (and 100,000) scheduled tasks.

``python bench/scheduler.py [--quick]``

Real parts on a real SQLite file: tasks are written to the scheduler's tables (one
transaction per size step; a mix of one-offs, cron and interval tasks spread over a year),
then measured through the real ``TaskStore`` and ``Runner`` on a hand-moved clock:
- ``next_due_at``: the one index probe the loop makes before it sleeps, at each size;
- a tick with nothing due, and ticks that each fire a burst of 100 due reminders;
- the event-loop stall while ticks run: a heartbeat coroutine records how late it wakes,
  since the tick's SQL runs in a worker thread.
A flat next-due time as the table grows 1,000× (100 to 100,000 tasks; --quick: 2,000) is
what O(log n) looks like.

Invariants: prints a table, then one JSON line; exit code 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from luna.config import build_config  # noqa: E402
from luna.memory.storage.store import Store  # noqa: E402
from luna.scheduler.clock import ManualClock  # noqa: E402
from luna.scheduler.delivery import DeliveryRouter  # noqa: E402
from luna.scheduler.execute import TurnExecutor  # noqa: E402
from luna.scheduler.model import to_db  # noqa: E402
from luna.scheduler.runner import Runner  # noqa: E402
from luna.scheduler.store import TaskStore  # noqa: E402

START = dt.datetime(2026, 12, 1, 7, 0, tzinfo=dt.UTC)
YEAR_S = 365 * 86_400


def add_tasks(store: Store, first_id: int, n: int, *, due_in: float | None = None) -> None:
    """``n`` tasks in one transaction: reminders spread over a year (or all due ``due_in``)."""
    now = to_db(START)
    rows = []
    for i in range(first_id, first_id + n):
        offset = due_in if due_in is not None else 3600 + (i * 7919) % YEAR_S
        when = START + dt.timedelta(seconds=offset)
        kind = ("once", to_db(when), None) if i % 3 == 0 else (
            ("cron", f"{i % 60} {i % 24} * * *", None) if i % 3 == 1
            else ("interval", "86400", to_db(when)))  # fmt: skip
        rows.append(("reminder", f"task {i}", *kind, "Europe/Berlin", to_db(when), "owner",
                     "owner", "repl", "{}", now, now))  # fmt: skip
    with store.transaction() as conn:
        conn.executemany(
            "INSERT INTO scheduled_tasks (kind, text, schedule_kind, spec, anchor, timezone, "
            "state, next_run_at, creator, scope, frontend, target, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, 'active', ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


async def measure_ticks(runner: Runner, clock: ManualClock, ticks: int) -> tuple[list, float]:
    """Tick cost (ms) and the largest event-loop stall (ms) seen while the ticks ran."""
    stalls: list[float] = []
    stop = asyncio.Event()

    async def heartbeat() -> None:
        loop = asyncio.get_running_loop()
        while not stop.is_set():
            t = loop.time()
            await asyncio.sleep(0.002)
            stalls.append((loop.time() - t - 0.002) * 1000)

    beat = asyncio.create_task(heartbeat())
    costs = []
    for _ in range(ticks):
        clock.advance(1)
        t = time.perf_counter()
        await runner.tick()
        costs.append((time.perf_counter() - t) * 1000)
    stop.set()
    await beat
    return costs, max(stalls, default=0.0)


async def main_async(quick: bool) -> dict:
    sizes = [100, 1_000, 10_000, 100_000] if not quick else [100, 1_000, 2_000]
    repeat = 2_000 if not quick else 300
    burst = 100
    with tempfile.TemporaryDirectory() as tmp:
        cfg = build_config(
            {"memory": {"db_path": str(Path(tmp) / "luna.db")}}, {}, base_dir=Path(tmp)
        )
        store = Store(cfg.memory.db_path, load_vec=False)
        store.migrate()
        tasks = TaskStore(store)
        clock = ManualClock(START)
        router = DeliveryRouter(tasks, clock)
        runner = Runner(cfg, tasks, clock, TurnExecutor(cfg, None, None), router)
        lookup: dict[int, list[float]] = {}
        have = 0
        for size in sizes:
            add_tasks(store, have + 1, size - have)
            have = size
            lookup[size] = timed(tasks.next_due_at, repeat)
        idle_costs, idle_stall = await measure_ticks(runner, clock, 50 if not quick else 20)
        # A burst: `burst` reminders all due at the next tick, 10 times over.
        burst_costs, burst_stalls = [], []
        for _ in range(10 if not quick else 3):
            add_tasks(store, have + 1, burst, due_in=(clock.now() - START).total_seconds() + 1)
            have += burst
            costs, stall = await measure_ticks(runner, clock, 1)
            burst_costs += costs
            burst_stalls.append(stall)
        fired = store.query("SELECT count(*) FROM deliveries")[0][0]
        store.close()
    largest = sizes[-1]
    result = {
        "benchmark": "scheduler",
        "quick": quick,
        "tasks": largest,
        "next_due_p50_ms": round(statistics.median(lookup[largest]), 4),
        "next_due_p95_ms": round(pct(lookup[largest], 0.95), 4),
        "next_due_p50_ms_by_size": {
            str(k): round(statistics.median(v), 4) for k, v in lookup.items()
        },
        "tick_idle_p50_ms": round(statistics.median(idle_costs), 3),
        "tick_idle_max_ms": round(max(idle_costs), 3),
        "tick_burst_reminders": burst,
        "tick_burst_p50_ms": round(statistics.median(burst_costs), 2),
        "tick_burst_max_ms": round(max(burst_costs), 2),
        "loop_stall_max_ms": round(max(idle_stall, *burst_stalls), 2),
        "fired": fired,
    }
    print(f"{'tasks':>8}  {'next_due p50':>13}  {'p95':>9}")
    for size, values in lookup.items():
        print(f"{size:>8,}  {statistics.median(values):>10.4f} ms  {pct(values, 0.95):>6.4f} ms")
    print(
        f"tick, nothing due ({largest:,} tasks): p50 {result['tick_idle_p50_ms']} ms, "
        f"max {result['tick_idle_max_ms']} ms"
    )
    print(
        f"tick firing {burst} reminders: p50 {result['tick_burst_p50_ms']} ms, "
        f"max {result['tick_burst_max_ms']} ms ({fired} fired in all)"
    )
    print(f"event-loop stall while ticking: max {result['loop_stall_max_ms']} ms")
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 tasks, fewer repeats")
    args = parser.parse_args(argv)
    print(json.dumps(asyncio.run(main_async(args.quick))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
