"""Event-loop stall under load: 10 concurrent sessions through the real Agent and real Memory.

``python bench/loop_stall.py [--quick] [--sessions N] [--turns N]``

The scripted fake LLM (``tests/fakes/llm_server.py``) runs in its own process, like
llama-server does, and streams every reply in small chunks. Each turn is two LLM rounds: a
streamed tool call (``echo``) and then a streamed text answer, so every turn exercises recall
(SQLite + embeddings in worker threads), the session log, the tool registry and streaming.
A heartbeat task sleeps 5 ms in a loop and records how late it wakes up: that lateness is the
time the loop was blocked. Target: max stall ≤ 20 ms.

Invariants:
- The embedding model is loaded and one warm-up turn runs before measuring; the librarian is
  off (its prompts would be answered with nonsense by the scripted server).
- Prints a table, then one JSON line; exit code 0 whatever the figures (the suite reads them).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from luna.agent import Agent  # noqa: E402
from luna.config import Config, build_config  # noqa: E402
from luna.llm import LLMClient  # noqa: E402
from luna.memory import Memory  # noqa: E402
from luna.messages import InboundMessage, TurnDone, TurnFailed  # noqa: E402
from luna.tools.registry import ToolRegistry  # noqa: E402
from tests.fakes.tools import echo_registry  # noqa: E402

HEARTBEAT_S = 0.005
TARGET_MAX_MS = 20.0
IDLE_S = 1.0

# Runs in the fake server's own process: a tool call first, then text, streamed in chunks.
SERVER_CODE = """
import signal, sys, threading
from tests.fakes.llm_server import FakeLLMServer, Reply

ANSWER = ("Here is what I found after checking: the echo tool answered, so everything "
          "works. I will remember this conversation for later. ") * 2

def reply(body):
    last = body["messages"][-1]
    if last.get("role") == "tool":
        return Reply(content=ANSWER, reasoning="The tool answered.", delay=0.03,
                     chunk_size=6, chunk_delay=0.002)
    return Reply(reasoning="Let me check with the echo tool.", delay=0.03, chunk_delay=0.002,
                 tool_calls=[{"name": "echo", "arguments": '{"text": "ping"}'}])

server = FakeLLMServer(model="fake-model", n_ctx=131072)
server.default = reply
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
server.start()
print("READY " + server.url, flush=True)
stop.wait()
server.stop()
"""


def start_fake_llm() -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER_CODE],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("READY "):
        proc.kill()
        raise SystemExit(f"fake LLM server did not start: {line!r}")
    return proc, line.split(" ", 1)[1]


def make_config(tmp: Path, url: str) -> Config:
    data = {
        "llm": {"endpoint": url, "model": "fake-model", "timeout": 60.0, "max_retries": 1},
        "memory": {"db_path": str(tmp / "data" / "luna.db"), "librarian": False},
        "observe": {"log_dir": str(tmp / "data" / "logs"), "console": False},
        "agent": {"workspace": str(tmp / "workspace")},
        "tools": {"outputs_dir": str(tmp / "data" / "tool_outputs")},
        "mcp": {"servers_file": str(tmp / "mcp_servers.json")},
    }
    return build_config(data, {}, base_dir=tmp)


def make_registry(cfg: Config) -> ToolRegistry:
    return echo_registry(cfg)


class Heartbeat:
    """Sleeps ``HEARTBEAT_S`` in a loop and records how late each wake-up is (ms)."""

    def __init__(self) -> None:
        self.lateness_ms: list[float] = []
        self.due = float("inf")  # when the current sleep should end (read by StallSampler)
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            t0 = time.perf_counter()
            self.due = t0 + HEARTBEAT_S
            await asyncio.sleep(HEARTBEAT_S)
            self.due = float("inf")
            self.lateness_ms.append((time.perf_counter() - t0 - HEARTBEAT_S) * 1000)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        if self._task:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass


class StallSampler:
    """``--explain``: a thread that samples the loop thread's stack while the heartbeat is late.

    A sample inside ``selectors.select`` means the loop was idle but could not run: waiting for
    the CPU or the GIL (worker threads, other processes). Anything else is code running on the
    loop for too long: the place to fix.
    """

    def __init__(self, heartbeat: Heartbeat, late_ms: float = 10.0) -> None:
        self.heartbeat = heartbeat
        self.late_s = late_ms / 1000
        self.samples: collections.Counter[str] = collections.Counter()
        self._stop = threading.Event()
        self._loop_thread = threading.get_ident()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(0.002):
            if time.perf_counter() - self.heartbeat.due < self.late_s:
                continue
            frame = sys._current_frames().get(self._loop_thread)
            if frame is None:
                continue
            stack = traceback.extract_stack(frame)
            if stack[-1].name == "select" and "selectors" in stack[-1].filename:
                self.samples["(waiting for CPU/GIL in select)"] += 1
                continue
            # The innermost frame, then the nearest callers outside asyncio's machinery.
            own = [f for f in stack[:-1] if "/asyncio/" not in f.filename][-3:]
            key = " <- ".join(
                f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in [stack[-1], *own[::-1]]
            )
            self.samples[key] += 1

    def report(self, top: int = 12) -> str:
        total = sum(self.samples.values()) or 1
        lines = [f"stall samples (every 2 ms while the heartbeat was >10 ms late): {total}"]
        for key, n in self.samples.most_common(top):
            lines.append(f"  {100 * n / total:5.1f}%  {key}")
        return "\n".join(lines)


async def one_turn(agent: Agent, session: str, text: str) -> tuple[bool, float]:
    t0 = time.perf_counter()
    ok = False
    async for event in agent.run_turn(InboundMessage(session_id=session, text=text)):
        if isinstance(event, TurnDone):
            ok = True
        elif isinstance(event, TurnFailed):
            ok = False
    return ok, (time.perf_counter() - t0) * 1000


async def session_worker(agent: Agent, sid: str, turns: int, out: list[tuple[bool, float]]) -> None:
    for i in range(turns):
        out.append(await one_turn(agent, sid, f"Turn {i} of {sid}: please check with echo."))


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(p / 100 * len(ordered))) - 1))]


async def bench(sessions: int, turns: int, explain: bool = False) -> dict[str, object]:
    proc, url = start_fake_llm()
    try:
        with tempfile.TemporaryDirectory(prefix="luna-loop-stall-") as d:
            cfg = make_config(Path(d), url)
            memory = Memory(cfg.memory)
            await memory.open()
            llm = LLMClient(cfg.llm)
            try:
                await memory.warmup()
                agent = Agent(cfg, llm, memory, make_registry(cfg))
                ok, _ = await one_turn(agent, "warmup", "warm up")
                if not ok:
                    raise SystemExit("the warm-up turn failed; is the fake LLM server working?")
                idle = Heartbeat()  # baseline: the same loop with nothing to do
                idle.start()
                await asyncio.sleep(IDLE_S)
                await idle.stop()
                await memory.flush_index()
                heartbeat = Heartbeat()
                heartbeat.start()
                sampler = StallSampler(heartbeat) if explain else None
                if sampler:
                    sampler.start()
                results: list[tuple[bool, float]] = []
                t0 = time.perf_counter()
                await asyncio.gather(
                    *(session_worker(agent, f"s{i}", turns, results) for i in range(sessions))
                )
                wall = time.perf_counter() - t0
                await heartbeat.stop()
                if sampler:
                    sampler.stop()
                    print(sampler.report())
            finally:
                await llm.close()
                await memory.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    late = heartbeat.lateness_ms
    turn_ms = [ms for ok, ms in results if ok]
    return {
        "benchmark": "loop_stall",
        "sessions": sessions,
        "turns": len(results),
        "failed_turns": sum(1 for ok, _ in results if not ok),
        "wall_s": round(wall, 2),
        "heartbeats": len(late),
        "max_stall_ms": round(max(late), 2),
        "p99_stall_ms": round(pct(late, 99), 2),
        "p50_stall_ms": round(statistics.median(late), 2),
        "idle_max_stall_ms": round(max(idle.lateness_ms), 2),
        "idle_p99_stall_ms": round(pct(idle.lateness_ms, 99), 2),
        "switch_interval_ms": round(sys.getswitchinterval() * 1000, 3),
        "turn_p50_ms": round(statistics.median(turn_ms), 1) if turn_ms else None,
        "target_max_ms": TARGET_MAX_MS,
        "pass": max(late) <= TARGET_MAX_MS,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Event-loop stall with concurrent sessions.")
    parser.add_argument("--quick", action="store_true", help="3 turns per session")
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--turns", type=int, default=None, help="turns per session (default 10)")
    parser.add_argument(
        "--switch-interval",
        type=float,
        default=None,
        metavar="MS",
        help="set sys.setswitchinterval (GIL hand-off, default 5 ms) for the run",
    )
    parser.add_argument(
        "--explain", action="store_true", help="sample the loop's stack during stalls"
    )
    args = parser.parse_args(argv)
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval / 1000)
    turns = args.turns or (3 if args.quick else 10)
    r = asyncio.run(bench(args.sessions, turns, args.explain))
    rows = [
        ("concurrent sessions", r["sessions"]),
        ("turns (2 LLM rounds + 1 tool each)", f"{r['turns']} ({r['failed_turns']} failed)"),
        ("wall time", f"{r['wall_s']} s"),
        ("heartbeats (5 ms sleep)", r["heartbeats"]),
        ("loop stall p50", f"{r['p50_stall_ms']} ms"),
        ("loop stall p99", f"{r['p99_stall_ms']} ms"),
        ("loop stall max", f"{r['max_stall_ms']} ms (target ≤ {TARGET_MAX_MS:g} ms: "
         f"{'PASS' if r['pass'] else 'FAIL'})"),
        ("turn latency p50", f"{r['turn_p50_ms']} ms"),
        ("idle loop stall p99 / max", f"{r['idle_p99_stall_ms']} / {r['idle_max_stall_ms']} ms "
         "(baseline: machine noise)"),
    ]  # fmt: skip
    width = max(len(k) for k, _ in rows)
    print("Event-loop stall, real Agent + Memory, scripted LLM in its own process")
    for key, value in rows:
        print(f"  {key.ljust(width)}  {value}")
    print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
