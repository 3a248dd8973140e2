"""Usage statistics: ``python -m luna stats [--days N] [--json]`` from the JSON-lines event log.

Reads ``observe.log_dir/luna-YYYY-MM-DD.jsonl`` (written by :mod:`luna.observe`) and sums the
``turn``, ``llm_call`` and ``tool_run`` events of the last N days into one readable table.
:func:`daily` gives the same events per UTC day (the web page's charts) and :func:`tool_runs`
the most recent tool runs; all three read the log through one iterator, :func:`events`.

Invariants:
- Read-only: never writes or rotates logs; a malformed line is counted and skipped, never fatal.
- Only events whose timestamp falls inside the window count (files are picked by name first,
  then each event by its ``ts``), so a file spanning midnight UTC is handled.
- File reading runs off the event loop (``asyncio.to_thread``).
- Percentiles use the nearest-rank method on the recorded latencies; no events => no figure.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import math
import re
from collections import Counter, deque
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from luna.config import Config
from luna.errors import UsageError

_FILE_RE = re.compile(r"luna-(\d{4}-\d{2}-\d{2})\.jsonl")  # fullmatch only


@dataclass
class Stats:
    """Aggregated usage over a window of days."""

    days: int
    since: str
    files: int = 0
    bad_lines: int = 0
    turns: int = 0
    turn_errors: int = 0
    turn_rounds: int = 0
    llm_calls: int = 0
    llm_errors: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens served from the server's KV cache
    prefilled_tokens: int = 0  # prompt tokens the server had to process
    prompt_ms: float = 0.0  # time spent on them
    tool_calls: int = 0
    tool_errors: int = 0
    sessions: int = 0
    turn_latency_ms: dict[str, float | None] = field(default_factory=dict)
    llm_latency_ms: dict[str, float | None] = field(default_factory=dict)
    tool_duration_ms: dict[str, float | None] = field(default_factory=dict)
    tools: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def cache_hit_ratio(self) -> float | None:
        """Share of prompt tokens the server did not have to prefill (None: no figures)."""
        counted = self.cached_tokens + self.prefilled_tokens
        return self.cached_tokens / counted if counted else None

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "cache_hit_ratio": self.cache_hit_ratio}


def percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile (p in 0..100) or None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[rank - 1]


def _latency(values: list[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 50), "p95": percentile(values, 95)}


def _parse_ts(value: Any) -> dt.datetime | None:
    if not isinstance(value, str):
        return None
    try:
        ts = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts if ts.tzinfo else ts.replace(tzinfo=dt.UTC)


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def _log_files(log_dir: Path, since: dt.datetime) -> list[Path]:
    # Files are named by local date; allow a day of slack either side for time zones.
    first_day = (since - dt.timedelta(days=1)).date()
    files = []
    if log_dir.is_dir():
        for path in sorted(log_dir.iterdir()):
            m = _FILE_RE.fullmatch(path.name)
            if m and dt.date.fromisoformat(m.group(1)) >= first_day:
                files.append(path)
    return files


@dataclass
class LogReading:
    """What :func:`events` read: files opened and lines it could not parse."""

    files: int = 0
    bad_lines: int = 0


def events(
    log_dir: Path, since: dt.datetime, now: dt.datetime, reading: LogReading | None = None
) -> Iterator[tuple[dt.datetime, dict[str, Any]]]:
    """(timestamp, event) for every event in ``[since, now]``, oldest file first (blocking)."""
    reading = reading if reading is not None else LogReading()
    for path in _log_files(log_dir, since):
        reading.files += 1
        with path.open(encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    reading.bad_lines += 1
                    continue
                if not isinstance(ev, dict):
                    reading.bad_lines += 1
                    continue
                ts = _parse_ts(ev.get("ts"))
                if ts is None or ts < since or ts > now:
                    continue
                yield ts, ev


def collect(log_dir: Path, days: int, *, now: dt.datetime | None = None) -> Stats:
    """Aggregate the events of the last ``days`` days (blocking: call via to_thread)."""
    now = now or dt.datetime.now(dt.UTC)
    since = now - dt.timedelta(days=days)
    stats = Stats(days=days, since=since.isoformat(timespec="seconds"))
    turn_ms: list[float] = []
    llm_ms: list[float] = []
    tool_ms: list[float] = []
    tools: dict[str, Counter[str]] = {}
    sessions: set[str] = set()
    reading = LogReading()
    for _ts, ev in events(log_dir, since, now, reading):
        _add_event(stats, ev, turn_ms, llm_ms, tool_ms, tools, sessions)
    stats.files = reading.files
    stats.bad_lines = reading.bad_lines
    stats.sessions = len(sessions)
    stats.turn_latency_ms = _latency(turn_ms)
    stats.llm_latency_ms = _latency(llm_ms)
    stats.tool_duration_ms = _latency(tool_ms)
    stats.tools = {
        name: {"calls": c["calls"], "errors": c["errors"]}
        for name, c in sorted(tools.items(), key=lambda kv: (-kv[1]["calls"], kv[0]))
    }
    return stats


def _add_event(
    stats: Stats,
    ev: dict[str, Any],
    turn_ms: list[float],
    llm_ms: list[float],
    tool_ms: list[float],
    tools: dict[str, Counter[str]],
    sessions: set[str],
) -> None:
    name = ev.get("event")
    if name == "turn":
        stats.turns += 1
        stats.turn_errors += 1 if ev.get("error") else 0
        stats.turn_rounds += int(_num(ev.get("rounds")) or 0)
        if (ms := _num(ev.get("latency_ms"))) is not None:
            turn_ms.append(ms)
        if isinstance(ev.get("session_id"), str):
            sessions.add(ev["session_id"])
    elif name == "llm_call":
        stats.llm_calls += 1
        stats.llm_errors += 1 if ev.get("error") else 0
        stats.prompt_tokens += int(_num(ev.get("prompt_tokens")) or 0)
        stats.completion_tokens += int(_num(ev.get("completion_tokens")) or 0)
        stats.cached_tokens += int(_num(ev.get("cached_tokens")) or 0)
        stats.prefilled_tokens += int(_num(ev.get("prefilled_tokens")) or 0)
        stats.prompt_ms += _num(ev.get("prompt_ms")) or 0.0
        if (ms := _num(ev.get("latency_ms"))) is not None and not ev.get("error"):
            llm_ms.append(ms)
    elif name == "tool_run":
        stats.tool_calls += 1
        is_error = bool(ev.get("is_error"))
        stats.tool_errors += 1 if is_error else 0
        tool = str(ev.get("tool") or "?")
        counter = tools.setdefault(tool, Counter())
        counter["calls"] += 1
        counter["errors"] += 1 if is_error else 0
        if (ms := _num(ev.get("duration_ms"))) is not None:
            tool_ms.append(ms)


@dataclass
class Day:
    """One UTC day of usage, for charts."""

    day: str
    turns: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens the server took from its KV cache
    prefilled_tokens: int = 0  # prompt tokens it had to process
    prompt_ms: float = 0.0
    tool_calls: int = 0
    tool_errors: int = 0
    turn_latency_ms: dict[str, float | None] = field(default_factory=dict)


def daily(log_dir: Path, days: int, *, now: dt.datetime | None = None) -> list[Day]:
    """Usage per UTC day over the last ``days`` days, oldest first, every day present (blocking).

    Turn latency p50/p95 are per day; cached + prefilled = prompt tokens on llama-server.
    """
    now = now or dt.datetime.now(dt.UTC)
    since = now - dt.timedelta(days=days)
    first = since.date()
    out = {
        (first + dt.timedelta(days=i)).isoformat(): Day((first + dt.timedelta(days=i)).isoformat())
        for i in range((now.date() - first).days + 1)
    }
    latencies: dict[str, list[float]] = {key: [] for key in out}
    for ts, ev in events(log_dir, since, now):
        key = ts.astimezone(dt.UTC).date().isoformat()
        day = out.get(key)
        if day is None:
            continue
        name = ev.get("event")
        if name == "turn":
            day.turns += 1
            if (ms := _num(ev.get("latency_ms"))) is not None:
                latencies[key].append(ms)
        elif name == "llm_call":
            day.prompt_tokens += int(_num(ev.get("prompt_tokens")) or 0)
            day.completion_tokens += int(_num(ev.get("completion_tokens")) or 0)
            day.cached_tokens += int(_num(ev.get("cached_tokens")) or 0)
            day.prefilled_tokens += int(_num(ev.get("prefilled_tokens")) or 0)
            day.prompt_ms += _num(ev.get("prompt_ms")) or 0.0
        elif name == "tool_run":
            day.tool_calls += 1
            day.tool_errors += 1 if ev.get("is_error") else 0
    for key, day in out.items():
        day.turn_latency_ms = _latency(latencies[key])
        day.prompt_ms = round(day.prompt_ms, 1)
    return list(out.values())


def tool_runs(
    log_dir: Path, days: int, limit: int, *, now: dt.datetime | None = None
) -> list[dict[str, Any]]:
    """The last ``limit`` ``tool_run`` events of the last ``days`` days, newest first
    (blocking)."""
    now = now or dt.datetime.now(dt.UTC)
    recent: deque[dict[str, Any]] = deque(maxlen=max(1, limit))
    for _ts, ev in events(log_dir, now - dt.timedelta(days=days), now):
        if ev.get("event") == "tool_run":
            recent.append(
                {
                    k: ev.get(k)
                    for k in (
                        "ts",
                        "tool",
                        "session_id",
                        "turn_id",
                        "duration_ms",
                        "is_error",
                        "output_bytes",
                    )
                }
            )
    return list(reversed(recent))


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value / 1000:.2f} s" if value >= 1000 else f"{value:.0f} ms"


def _share(value: int, ratio: float | None) -> str:
    return f"{value:,}" + (f" ({ratio:.0%} hit ratio)" if ratio is not None else "")


BARS = " ▁▂▃▄▅▆▇█"


def format_days(days: list[Day]) -> str:
    """Prefill per day, as a small chart: the tokens the server processed and the cache share."""
    peak = max((d.prefilled_tokens for d in days), default=0)
    lines = ["day         prefilled  cache hit  prefill time", ""]
    for d in days:
        counted = d.cached_tokens + d.prefilled_tokens
        hit = f"{d.cached_tokens / counted:>8.0%}" if counted else "       -"
        bar = BARS[round(d.prefilled_tokens / peak * (len(BARS) - 1))] if peak else " "
        lines.append(
            f"{d.day}  {d.prefilled_tokens:>9,} {bar} {hit}  {_ms(d.prompt_ms or None):>11}"
        )
    return "\n".join(lines)


def format_table(stats: Stats) -> str:
    """The human-readable report."""
    rows: list[tuple[str, str]] = [
        ("turns", f"{stats.turns:,}"),
        ("  with errors", f"{stats.turn_errors:,}"),
        ("  sessions", f"{stats.sessions:,}"),
        (
            "  latency p50 / p95",
            f"{_ms(stats.turn_latency_ms['p50'])} / {_ms(stats.turn_latency_ms['p95'])}",
        ),
        ("LLM calls", f"{stats.llm_calls:,}"),
        ("  with errors", f"{stats.llm_errors:,}"),
        ("  prompt tokens", f"{stats.prompt_tokens:,}"),
        ("    from the KV cache", _share(stats.cached_tokens, stats.cache_hit_ratio)),
        ("    prefilled", f"{stats.prefilled_tokens:,} in {_ms(stats.prompt_ms)}"),
        ("  completion tokens", f"{stats.completion_tokens:,}"),
        (
            "  latency p50 / p95",
            f"{_ms(stats.llm_latency_ms['p50'])} / {_ms(stats.llm_latency_ms['p95'])}",
        ),
        ("tool calls", f"{stats.tool_calls:,}"),
        ("  with errors", f"{stats.tool_errors:,}"),
        (
            "  duration p50 / p95",
            f"{_ms(stats.tool_duration_ms['p50'])} / {_ms(stats.tool_duration_ms['p95'])}",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    plural = "s" if stats.days != 1 else ""
    lines = [f"Luna usage, last {stats.days} day{plural} (since {stats.since})", ""]
    lines += [f"{k.ljust(width)}  {v}" for k, v in rows]
    if stats.tools:
        lines += ["", "tool".ljust(width) + "  calls  errors"]
        for name, c in stats.tools.items():
            lines.append(f"{name.ljust(width)}  {c['calls']:>5}  {c['errors']:>6}")
    if not stats.files:
        lines += ["", "(no log files found in the window)"]
    if stats.bad_lines:
        lines += ["", f"({stats.bad_lines} unreadable log lines skipped)"]
    return "\n".join(lines)


async def run_stats(args: argparse.Namespace, cfg: Config) -> int:
    """Handler for ``luna stats``."""
    days = int(getattr(args, "days", 7))
    if days < 1:
        raise UsageError("--days must be at least 1")
    stats = await asyncio.to_thread(collect, cfg.observe.log_dir, days)
    per_day = await asyncio.to_thread(daily, cfg.observe.log_dir, days)
    if getattr(args, "json", False):
        print(json.dumps({**stats.to_dict(), "per_day": [asdict(d) for d in per_day]}))
    else:
        print(format_table(stats))
        print("\n" + format_days(per_day))
        print(f"\nlogs: {cfg.observe.log_dir}")
    return 0


def add_parser(subparsers: Any) -> None:
    """Register ``stats`` on the ``python -m luna`` argument parser."""
    p = subparsers.add_parser(
        "stats",
        help="usage statistics (turns, LLM calls, tokens, tools, latency) from the logs",
        description="Summarize the JSON-lines event logs of the last N days.",
    )
    p.add_argument("--days", type=int, default=7, help="how many days back to count (default 7)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    p.set_defaults(handler=run_stats)
