"""Run Luna's benchmark suite: ``python bench/run.py [--quick] [--only NAME] [--json-out FILE]``.

Each benchmark is its own script in ``bench/`` that prints a human-readable table and, as its
last JSON line, one JSON object with its figures. This runner starts each one as a subprocess
(so one benchmark's imports, threads and memory never skew the next), streams its output,
collects that JSON line and ends with a summary table plus one JSON line for the whole suite.

Invariants:
- Benchmarks run one after another, never concurrently (their timings would disturb each other).
- ``--quick`` is passed through to every script: smaller data, fewer iterations, same code.
- A missing script, a crash, a timeout or output without a JSON line marks that benchmark
  failed; the others still run, and the exit code is 1 when any failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"

# name -> (script, what it measures)
BENCHMARKS: dict[str, tuple[str, str]] = {
    "turn_overhead": ("turn_overhead.py", "per-turn overhead outside the LLM"),
    "prefix_reuse": ("prefix_reuse.py", "prompt prefix reuse (cached tokens) across turns"),
    "locomo": ("locomo.py", "LoCoMo long-conversation recall"),
    "locomo_ablation": ("locomo_ablation.py", "LoCoMo recall with one part changed at a time"),
    "memory_scale": ("memory_scale.py", "memory ingest and query at 100k items"),
    "loop_stall": ("loop_stall.py", "event-loop stall with 10 concurrent sessions"),
    "scheduler": ("scheduler.py", "next-due lookup and tick cost, 10,000+ scheduled tasks"),
    "cold_start": ("cold_start.py", "python -m luna: first answer, turn gap, RSS vs. a baseline"),
}
DEFAULT_TIMEOUT = 3600.0


def last_json_object(text: str) -> dict[str, Any] | None:
    """The last line of ``text`` that parses as a JSON object."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                return obj
    return None


def run_one(name: str, *, quick: bool, timeout: float, echo: bool = True) -> dict[str, Any]:
    """Run one benchmark script; returns {name, status, seconds, result|error}."""
    script = BENCH / BENCHMARKS[name][0]
    if not script.exists():
        return {
            "benchmark": name,
            "status": "missing",
            "seconds": 0.0,
            "error": f"{script} does not exist",
        }
    cmd = [sys.executable, str(script)] + (["--quick"] if quick else [])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )
    captured: list[str] = []
    assert proc.stdout is not None
    deadline = start + timeout
    timed_out = False
    for line in proc.stdout:
        captured.append(line)
        if echo:
            sys.stdout.write(f"  {line}" if line.strip() else line)
            sys.stdout.flush()
        if time.perf_counter() > deadline:
            timed_out = True
            proc.kill()
            break
    try:
        rc = proc.wait(timeout=max(1.0, deadline - time.perf_counter()))
    except subprocess.TimeoutExpired:
        proc.kill()
        rc = proc.wait()
        timed_out = True
    seconds = round(time.perf_counter() - start, 1)
    text = "".join(captured)
    if timed_out:
        return {
            "benchmark": name,
            "status": "timeout",
            "seconds": seconds,
            "error": f"killed after {timeout:.0f} s",
        }
    result = last_json_object(text)
    if rc != 0:
        tail = " | ".join(text.strip().splitlines()[-3:])
        return {
            "benchmark": name,
            "status": "failed",
            "seconds": seconds,
            "error": f"exit code {rc}: {tail[-300:]}",
            "result": result,
        }
    if result is None:
        return {
            "benchmark": name,
            "status": "failed",
            "seconds": seconds,
            "error": "no JSON line in the output",
        }
    return {"benchmark": name, "status": "ok", "seconds": seconds, "result": result}


def _headline(result: dict[str, Any] | None) -> str:
    """A short figure summary from a benchmark's JSON object (first few numeric fields)."""
    if not result:
        return ""
    parts = []
    for key, value in result.items():
        if key in ("benchmark", "quick", "machine"):
            continue
        if isinstance(value, bool) or not isinstance(value, int | float):
            continue
        parts.append(f"{key}={value:g}" if isinstance(value, float) else f"{key}={value}")
        if len(parts) == 4:
            break
    return ", ".join(parts)


def summary_table(rows: list[dict[str, Any]]) -> str:
    head = ("benchmark", "status", "time", "figures")
    body = [
        (
            r["benchmark"],
            r["status"],
            f"{r['seconds']:.1f} s",
            _headline(r.get("result")) or r.get("error", ""),
        )
        for r in rows
    ]
    widths = [max(len(str(x[i])) for x in [head, *body]) for i in range(3)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(head[:3], widths, strict=True)) + "  " + head[3]]
    lines.append("-" * min(100, len(lines[0]) + 40))
    for row in body:
        cells = "  ".join(str(c).ljust(w) for c, w in zip(row[:3], widths, strict=True))
        lines.append(f"{cells}  {row[3]}")
    return "\n".join(lines)


def machine() -> dict[str, Any]:
    return {
        "host": platform.node(),
        "cpu": platform.processor() or platform.machine(),
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "system": f"{platform.system()} {platform.release()}",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run in minutes")
    parser.add_argument(
        "--only",
        action="append",
        choices=list(BENCHMARKS),
        help="run only this benchmark (repeatable)",
    )
    parser.add_argument("--json-out", type=Path, help="also write the suite's results here")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds allowed per benchmark (default 3600)",
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    args = parser.parse_args(argv)
    if args.list:
        for name, (script, what) in BENCHMARKS.items():
            print(f"{name:14} bench/{script:18} {what}")
        return 0
    names = args.only or list(BENCHMARKS)
    rows = []
    for name in names:
        print(
            f"\n=== {name}: {BENCHMARKS[name][1]}{' (quick)' if args.quick else ''} ===", flush=True
        )
        row = run_one(name, quick=args.quick, timeout=args.timeout)
        if row["status"] != "ok":
            print(f"  !! {name} {row['status']}: {row.get('error', '')}", flush=True)
        rows.append(row)
    print("\n=== summary ===")
    print(summary_table(rows))
    for row in rows:
        print(
            json.dumps(
                {
                    "benchmark": row["benchmark"],
                    "status": row["status"],
                    "seconds": row["seconds"],
                    **(row.get("result") or {}),
                }
            )
        )
    suite = {"suite": "luna-bench", "quick": args.quick, "machine": machine(), "results": rows}
    if args.json_out:
        args.json_out.write_text(json.dumps(suite, indent=2) + "\n")
    print(json.dumps(suite))
    return 0 if all(r["status"] == "ok" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
