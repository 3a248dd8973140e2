"""The scheduler benchmark runs in --quick mode and reports its figures (no timing asserted)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.luna_process import REPO


def test_bench_scheduler_quick_reports_lookup_and_tick_figures() -> None:
    proc = subprocess.run(
        [sys.executable, "bench/scheduler.py", "--quick"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert data["benchmark"] == "scheduler" and data["quick"] is True
    assert set(data["next_due_p50_ms_by_size"]) == {"100", "1000", "2000"}
    assert data["fired"] == 3 * data["tick_burst_reminders"]  # every due reminder, once
    assert data["tick_burst_max_ms"] >= data["tick_burst_p50_ms"] > 0
    assert "next_due p50" in proc.stdout
