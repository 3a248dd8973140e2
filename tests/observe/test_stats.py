"""`luna stats`: aggregates a real event log written through luna.observe."""

from __future__ import annotations

import argparse
import datetime as dt
import json
from pathlib import Path

import pytest

from luna import observe
from luna.observe.stats import add_parser, collect, percentile, run_stats


def _write_log(log_dir: Path) -> None:
    observe.setup(log_dir, console=False)
    try:
        with observe.turn_context("s1"):
            observe.log_event(
                "llm_call",
                model="m",
                prompt_tokens=100,
                completion_tokens=10,
                latency_ms=200.0,
                stream=True,
                error=None,
            )
            observe.log_event(
                "tool_run", tool="bash", duration_ms=30.0, is_error=False, output_bytes=12
            )
            observe.log_event(
                "llm_call",
                model="m",
                prompt_tokens=150,
                completion_tokens=20,
                latency_ms=400.0,
                stream=True,
                error=None,
            )
            observe.log_event("turn", rounds=2, latency_ms=700.0, error=None)
        with observe.turn_context("s2"):
            observe.log_event(
                "llm_call",
                model="m",
                prompt_tokens=50,
                completion_tokens=0,
                latency_ms=5000.0,
                stream=True,
                error="LLMUnreachableError",
            )
            observe.log_event(
                "tool_run", tool="bash", duration_ms=10.0, is_error=True, output_bytes=3
            )
            observe.log_event(
                "tool_run", tool="fetch", duration_ms=90.0, is_error=False, output_bytes=3
            )
            observe.log_event("turn", rounds=1, latency_ms=5100.0, error="LLMUnreachableError")
        observe.log_event("memory_op", op="recall", duration_ms=3.0, count=2)
    finally:
        observe.shutdown()
    # An old event (outside a 1-day window) and a corrupt line, appended to today's file.
    path = next(log_dir.glob("luna-*.jsonl"))
    old = (dt.datetime.now(dt.UTC) - dt.timedelta(days=3)).isoformat()
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"ts": old, "event": "turn", "rounds": 9, "latency_ms": 1.0}) + "\n")
        f.write("{not json\n")


def test_stats_collect_counts_events_in_window(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    _write_log(log_dir)
    s = collect(log_dir, days=1)
    assert (s.turns, s.turn_errors, s.turn_rounds, s.sessions) == (2, 1, 3, 2)
    assert (s.llm_calls, s.llm_errors) == (3, 1)
    assert (s.prompt_tokens, s.completion_tokens) == (300, 30)
    assert (s.tool_calls, s.tool_errors) == (3, 1)
    assert s.tools == {"bash": {"calls": 2, "errors": 1}, "fetch": {"calls": 1, "errors": 0}}
    # Failed LLM calls don't count towards latency.
    assert s.llm_latency_ms == {"p50": 200.0, "p95": 400.0}
    assert s.turn_latency_ms == {"p50": 700.0, "p95": 5100.0}
    assert s.bad_lines == 1
    # A wider window picks up the old turn too.
    assert collect(log_dir, days=7).turns == 3


def test_stats_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 95) == 95.0
    assert percentile([7.0], 95) == 7.0
    assert percentile([], 50) is None


async def test_stats_command_prints_table_and_json(
    tmp_path: Path, luna_config, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = luna_config()
    _write_log(cfg.observe.log_dir)
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))

    args = parser.parse_args(["stats", "--days", "1"])
    assert await args.handler(args, cfg) == 0
    out = capsys.readouterr().out
    assert "turns" in out and "prompt tokens" in out and "300" in out
    assert "bash" in out and "fetch" in out
    assert "p50 / p95" in out

    args = parser.parse_args(["stats", "--json"])
    assert await run_stats(args, cfg) == 0
    data = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert data["days"] == 7 and data["turns"] == 3 and data["completion_tokens"] == 30


async def test_stats_command_handles_empty_log_dir(
    luna_config, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = luna_config()
    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["stats"])
    assert await args.handler(args, cfg) == 0
    out = capsys.readouterr().out
    assert "no log files" in out
