"""Per-turn overhead: the time a turn spends outside the LLM.
``python bench/turn_overhead.py [--turns 60] [--history 2000] [--quick]``

Drives the real Agent (real Memory with embeddings and hybrid recall over a database already
holding ``--history`` messages, the real tool registry) against the scripted LLM server running
in its own process, as llama-server would. Every other turn makes one tool call
(``list_directory``). From Luna's own JSON-lines log, overhead = the turn's wall time minus the
wall time of its LLM calls: recall, prompt assembly, persistence, tool dispatch and the
output pipeline. Prints p50/p95/max as a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from luna import observe  # noqa: E402
from luna.agent import Agent  # noqa: E402
from luna.config import build_config  # noqa: E402
from luna.llm import LLMClient  # noqa: E402
from luna.memory import Memory  # noqa: E402
from luna.messages import InboundMessage, TurnDone  # noqa: E402
from luna.tools import build_registry  # noqa: E402

SERVER_CODE = """
import signal, sys, threading
from tests.fakes.llm_server import FakeLLMServer, Reply

def reply(body):
    last = body["messages"][-1]
    if last["role"] == "user" and "files" in last["content"]:
        return Reply(tool_calls=[{"name": "list_directory", "arguments": "{}"}])
    return Reply(content="Done: here is a short answer for you.", chunk_size=8)

server = FakeLLMServer(n_ctx=131072).start()  # the production context, as llm.context_tokens
server.default = reply
print("READY " + server.url, flush=True)
signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))
threading.Event().wait()
"""
TOPICS = ["garden", "dentist", "holiday", "bike", "sister", "taxes", "router", "recipes"]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def start_server() -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVER_CODE], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    if not line.startswith("READY "):
        proc.kill()
        raise SystemExit(f"fake LLM server did not start: {line!r}")
    return proc, line.split(" ", 1)[1]


async def seed_history(memory: Memory, n: int) -> None:
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        role = "user" if i % 2 == 0 else "assistant"
        text = f"Message {i} about the {topic}: detail number {i * 7 % 101} worth remembering."
        await memory.append_message(f"old-{i // 40}", {"role": role, "content": text})
    await memory.flush_index()


async def run(turns: int, history: int) -> dict[str, Any]:
    proc, url = start_server()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp)
            cfg = build_config(
                {
                    "llm": {"endpoint": url, "model": "fake-model"},
                    "memory": {"db_path": str(base / "data/luna.db"), "librarian": False},
                    "observe": {"log_dir": str(base / "data/logs"), "console": False},
                    "agent": {"workspace": str(base / "ws")},
                },
                {},
                base_dir=base,
            )
            cfg.agent.workspace.mkdir(parents=True)
            observe.setup(cfg.observe.log_dir, console=False)
            memory = Memory(cfg.memory)
            await memory.open(background=False)
            await seed_history(memory, history)
            await memory.warmup()
            llm = LLMClient(cfg.llm)
            agent = Agent(cfg, llm, memory, build_registry(cfg))
            try:
                for i in range(turns + 2):  # two warm-up turns, dropped below
                    text = (
                        "show me the files please"
                        if i % 2
                        else f"what did I say about the {TOPICS[i % len(TOPICS)]}?"
                    )
                    msg = InboundMessage(session_id="bench", text=text)
                    events = [e async for e in agent.run_turn(msg)]
                    if not isinstance(events[-1], TurnDone):
                        raise SystemExit(f"turn {i} failed: {events[-1]}")
            finally:
                await llm.close()
                await memory.close()
                observe.shutdown()
            records = [
                json.loads(line)
                for f in sorted(cfg.observe.log_dir.glob("luna-*.jsonl"))
                for line in f.read_text().splitlines()
            ]
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    llm_ms: dict[str, float] = defaultdict(float)
    turn_ms: list[tuple[str, float]] = []
    for r in records:
        if r["event"] == "llm_call":
            llm_ms[r["turn_id"]] += r["latency_ms"]
        elif r["event"] == "turn":
            turn_ms.append((r["turn_id"], r["latency_ms"]))
    overheads = [total - llm_ms[tid] for tid, total in turn_ms][2:]
    return {
        "benchmark": "turn_overhead",
        "turns": len(overheads),
        "history_messages": history,
        "overhead_p50_ms": round(statistics.median(overheads), 2),
        "overhead_p95_ms": round(percentile(overheads, 0.95), 2),
        "overhead_max_ms": round(max(overheads), 2),
        "llm_p50_ms": round(statistics.median(list(llm_ms.values())), 2),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description="Per-turn overhead outside the LLM.")
    parser.add_argument("--turns", type=int, default=60, help="measured turns (default 60)")
    parser.add_argument(
        "--history", type=int, default=2000, help="messages already in the database (default 2000)"
    )
    parser.add_argument("--quick", action="store_true", help="20 turns over 500 messages")
    args = parser.parse_args()
    if args.quick:
        args.turns, args.history = 20, 500
    result = asyncio.run(run(args.turns, args.history))
    print(
        f"per-turn overhead outside the LLM ({result['turns']} turns, "
        f"{result['history_messages']} messages in the database)"
    )
    print(f"{'':<10}{'ms':>10}")
    for key in ("p50", "p95", "max"):
        print(f"{key:<10}{result[f'overhead_{key}_ms']:>10.2f}")
    print(f"{'llm p50':<10}{result['llm_p50_ms']:>10.2f}   (the scripted server, for scale)")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
