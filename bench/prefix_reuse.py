"""Prompt prefix reuse across a session: how much of each request llama-server can serve from
its KV cache. ``python bench/prefix_reuse.py [--turns 6] [--quick]``

Drives the real Agent (real Memory with recall, real tool registry) through a session against
the scripted LLM server, recording every request. For each consecutive pair of requests it
computes the share of the previous prompt that the next one repeats verbatim from its start —
the part llama-server's prompt cache reuses. The prompt is serialized as the server sees it:
tool declarations first (chat templates put them in the system block), then the messages.
Target: median share ≥ 0.90 over a 6-turn session.

Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from luna.agent import Agent  # noqa: E402
from luna.agent.prompt import prefix_share  # noqa: E402
from luna.config import build_config  # noqa: E402
from luna.llm import LLMClient  # noqa: E402
from luna.memory import Memory  # noqa: E402
from luna.messages import InboundMessage, TurnDone  # noqa: E402
from luna.tools import build_registry  # noqa: E402
from tests.fakes.llm_server import FakeLLMServer, Reply  # noqa: E402

TARGET = 0.90
USER_TURNS = [
    "What's on my plate this week? I think I mentioned the dentist.",
    "List the files in your workspace, please.",
    "Remind me what I said about the garden.",
    "Write a short note about the dentist to notes.txt.",
    "What did we decide about the holiday?",
    "Thanks. Summarize this conversation in one line.",
    "One more: what is my sister's name?",
    "And the bike?",
]
NOTES = [
    "The dentist appointment is on Thursday at 9:30.",
    "We planted tomatoes and basil in the raised garden bed in May.",
    "The holiday plan: a week in Lisbon in late September.",
    "My sister is called Ana and lives in Porto.",
    "My bike is a green Brompton with a squeaky chain.",
]


def share(prev: dict[str, Any], cur: dict[str, Any]) -> float:
    # Tool declarations first, as chat templates put them in the system block.
    def prompt(request: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"tools": request.get("tools") or []}, *request["messages"]]

    return prefix_share(prompt(prev), prompt(cur))


def script(turn_index: int) -> list[Reply]:
    if turn_index == 1:
        return [
            Reply(tool_calls=[{"name": "list_directory", "arguments": "{}"}]),
            Reply(content="Your workspace is empty apart from what we write together."),
        ]
    if turn_index == 3:
        return [
            Reply(
                tool_calls=[
                    {
                        "name": "write_file",
                        "arguments": json.dumps(
                            {"path": "notes.txt", "content": "Dentist Thursday 9:30"}
                        ),
                    }
                ]
            ),
            Reply(content="Saved the note to notes.txt."),
        ]
    return [Reply(content=f"Answer {turn_index}: here is what I know, briefly and clearly.")]


async def run(turns: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp, FakeLLMServer() as server:
        base = Path(tmp)
        cfg = build_config(
            {
                "llm": {"endpoint": server.url, "model": server.model},
                "memory": {"db_path": str(base / "data/luna.db"), "librarian": False},
                "observe": {"log_dir": str(base / "data/logs"), "console": False},
                "agent": {"workspace": str(base / "ws")},
            },
            {},
            base_dir=base,
        )
        cfg.agent.workspace.mkdir(parents=True)
        memory = Memory(cfg.memory)
        await memory.open(background=False)
        for note in NOTES:
            await memory.add_memory(note, importance=6)
        await memory.flush_index()
        llm = LLMClient(cfg.llm)
        agent = Agent(cfg, llm, memory, build_registry(cfg))
        boundaries = []
        try:
            for i in range(turns):
                server.script(*script(i))
                boundaries.append(len(server.requests))
                msg = InboundMessage(session_id="bench", text=USER_TURNS[i % len(USER_TURNS)])
                events = [e async for e in agent.run_turn(msg)]
                if not isinstance(events[-1], TurnDone):
                    raise SystemExit(f"turn {i} failed: {events[-1]}")
        finally:
            await llm.close()
            await memory.close()
        requests = server.requests
    pairs = [share(a, b) for a, b in zip(requests, requests[1:], strict=False)]
    turn_starts = [share(requests[i - 1], requests[i]) for i in boundaries[1:]]
    return {
        "benchmark": "prefix_reuse",
        "turns": turns,
        "requests": len(requests),
        "median_share": round(statistics.median(pairs), 4),
        "min_share": round(min(pairs), 4),
        "median_share_turn_start": round(statistics.median(turn_starts), 4),
        "target_median": TARGET,
        "pass": statistics.median(pairs) >= TARGET,
        "pairs": [round(p, 4) for p in pairs],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=6, help="turns in the session (default 6)")
    parser.add_argument("--quick", action="store_true", help="same run (it is already quick)")
    args = parser.parse_args()
    result = asyncio.run(run(args.turns))
    print(f"prefix reuse over a {result['turns']}-turn session ({result['requests']} requests)")
    print(f"{'request pair':<14}{'share reused':>14}")
    for i, p in enumerate(result["pairs"], 1):
        print(f"{f'{i} -> {i + 1}':<14}{p:>14.3f}")
    print(f"{'median':<14}{result['median_share']:>14.3f}   (target >= {TARGET})")
    print(f"{'turn starts':<14}{result['median_share_turn_start']:>14.3f}   (median)")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
