"""Per-day usage (the web page's charts) and recent tool runs, from a real event log."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

from luna.observe.stats import collect, daily, tool_runs

NOW = dt.datetime(2026, 12, 3, 12, 0, tzinfo=dt.UTC)


def _log(folder: Path, day: str, *events: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / f"luna-{day}.jsonl").open("a") as f:
        for ev in events:
            f.write(json.dumps(ev) + "\n")
        f.write("{not json\n")


def test_daily_has_every_day_with_cache_split_latency_and_tool_errors(tmp_path: Path) -> None:
    _log(
        tmp_path,
        "2026-12-01",
        {"ts": "2026-12-01T10:00:00+00:00", "event": "llm_call", "prompt_tokens": 1000,
         "completion_tokens": 50, "cached_tokens": 800, "prefilled_tokens": 200, "prompt_ms": 12.5},
        {"ts": "2026-12-01T10:00:01+00:00", "event": "turn", "latency_ms": 100.0},
        {"ts": "2026-12-01T10:00:02+00:00", "event": "turn", "latency_ms": 300.0},
        {"ts": "2026-12-01T10:00:03+00:00", "event": "tool_run", "tool": "bash", "is_error": True},
    )  # fmt: skip
    _log(
        tmp_path,
        "2026-12-03",
        {"ts": "2026-12-03T09:00:00+00:00", "event": "tool_run", "tool": "echo",
         "is_error": False, "duration_ms": 3.0, "session_id": "s1"},
        {"ts": "2026-12-03T13:00:00+00:00", "event": "turn", "latency_ms": 1.0},  # after NOW
    )  # fmt: skip
    days = daily(tmp_path, 3, now=NOW)
    assert [d.day for d in days] == ["2026-11-30", "2026-12-01", "2026-12-02", "2026-12-03"]
    first = days[1]
    assert (first.prompt_tokens, first.cached_tokens, first.prefilled_tokens) == (1000, 800, 200)
    assert first.prompt_ms == 12.5 and first.turns == 2
    assert first.turn_latency_ms == {"p50": 100.0, "p95": 300.0}
    assert (first.tool_calls, first.tool_errors) == (1, 1)
    assert days[2].turns == 0 and days[2].turn_latency_ms == {"p50": None, "p95": None}
    assert days[3].turns == 0 and days[3].tool_calls == 1
    # The summary over the same window agrees (and still counts unreadable lines).
    summary = collect(tmp_path, 3, now=NOW)
    assert summary.turns == 2 and summary.tool_errors == 1 and summary.bad_lines == 2


def test_tool_runs_are_newest_first_and_bounded(tmp_path: Path) -> None:
    events = [
        {"ts": f"2026-12-03T0{i}:00:00+00:00", "event": "tool_run", "tool": f"t{i}",
         "is_error": i == 2, "duration_ms": float(i), "output_bytes": i}
        for i in range(5)
    ]  # fmt: skip
    _log(tmp_path, "2026-12-03", *events)
    runs = tool_runs(tmp_path, 7, 3, now=NOW)
    assert [r["tool"] for r in runs] == ["t4", "t3", "t2"]
    assert runs[2]["is_error"] is True and set(runs[0]) >= {"ts", "session_id", "duration_ms"}
