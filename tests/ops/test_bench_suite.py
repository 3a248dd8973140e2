"""The benchmark runner and the loop-stall benchmark, run as real subprocesses.

No timing is asserted here: figures belong to the benchmark output, not to tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]  # bench/ imports need the repo on sys.path first
sys.path.insert(0, str(ROOT))

from bench import run as suite  # noqa: E402


def test_bench_last_json_object_picks_the_figures_line() -> None:
    text = 'table\n{"a": 1}\nmore\n{"b": 2, "c": [1]}\n{broken\n'
    assert suite.last_json_object(text) == {"b": 2, "c": [1]}
    assert suite.last_json_object("no json here") is None


def test_bench_runner_collects_ok_failed_and_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "good.py").write_text(
        "import json, sys\n"
        "print('table row')\n"
        "print(json.dumps({'benchmark': 'good', 'quick': '--quick' in sys.argv, 'x_ms': 1.5}))\n"
    )
    (tmp_path / "bad.py").write_text("raise SystemExit('boom')\n")
    (tmp_path / "silent.py").write_text("print('no figures')\n")
    monkeypatch.setattr(suite, "BENCH", tmp_path)
    monkeypatch.setattr(
        suite,
        "BENCHMARKS",
        {
            "good": ("good.py", "a good one"),
            "bad": ("bad.py", "crashes"),
            "silent": ("silent.py", "prints no JSON"),
            "gone": ("gone.py", "not written yet"),
        },
    )
    out_file = tmp_path / "suite.json"
    rc = suite.main(["--quick", "--json-out", str(out_file)])
    out = capsys.readouterr().out
    assert rc == 1
    assert "table row" in out and "=== summary ===" in out
    suite_data = json.loads(out.strip().splitlines()[-1])
    assert suite_data == json.loads(out_file.read_text())
    by_name = {r["benchmark"]: r for r in suite_data["results"]}
    assert by_name["good"]["status"] == "ok"
    assert by_name["good"]["result"]["quick"] is True
    assert by_name["bad"]["status"] == "failed" and "boom" in by_name["bad"]["error"]
    assert by_name["silent"]["status"] == "failed"
    assert by_name["gone"]["status"] == "missing"
    # One JSON line per benchmark before the suite line.
    lines = [json.loads(x) for x in out.splitlines() if x.startswith('{"benchmark"')]
    assert [x["benchmark"] for x in lines] == ["good", "bad", "silent", "gone"]
    assert lines[0]["x_ms"] == 1.5


def test_bench_runner_lists_the_suite(capsys: pytest.CaptureFixture[str]) -> None:
    assert suite.main(["--list"]) == 0
    out = capsys.readouterr().out
    for name in (
        "turn_overhead", "prefix_reuse", "locomo", "memory_scale", "loop_stall", "cold_start"
    ):  # fmt: skip
        assert name in out


def test_bench_loop_stall_runs_real_turns() -> None:
    """A tiny loop-stall run: two sessions, one turn each, through the real Agent."""
    proc = subprocess.run(
        [sys.executable, "bench/loop_stall.py", "--sessions", "2", "--turns", "1"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["benchmark"] == "loop_stall"
    assert data["turns"] == 2 and data["failed_turns"] == 0
    assert data["heartbeats"] > 0 and data["max_stall_ms"] >= data["p50_stall_ms"]
    assert "loop stall max" in proc.stdout


def test_bench_cold_start_runs_the_real_luna_process() -> None:
    """Two short runs of the current code (the first on an empty data folder: it exports the
    embedding model once); figures and the process tree come back, nothing is timed here."""
    proc = subprocess.run(
        [sys.executable, "bench/cold_start.py", "--no-baseline", "--runs", "2", "--turns", "3"],
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["benchmark"] == "cold_start" and "baseline" not in data
    assert 0 < data["prompt_s"] and 0 < data["first_request_s"]
    assert data["gap_p95_ms"] >= data["gap_p50_ms"] > 0
    last = data["runs"]["current"][-1]
    assert {"main", "embedding worker"} <= set(last["rss"])
    # Every recall of the run says which mode served it.
    assert set(last["recall_modes"]) <= {"hybrid", "fts_warming"}
    assert sum(last["recall_modes"].values()) == 1 + 3 + 1
    assert "start → first model request" in proc.stdout
