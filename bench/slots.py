"""Three interleaved sessions on one real llama-server: what each slot strategy prefills again.

``python bench/slots.py [--quick]``

The workload: sessions A, B and C take turns (A1 B1 C1 A2 B2 C2 ...), each turn a tool round
with a result of several KB and an answer, through the real Agent, against the real C++
llama-server rendering Luna's Qwen3.5 template, with scripted model words
(tests/fakes/scripted_llama.py). Per request: prompt, cached and prefilled tokens, and tokens
prefilled again = prefilled minus what is new since that session's previous request (its new
messages and the template's wrapping).

Server configurations, each a fresh server, all with the production model's caching rules (no
``--swa-full``: a request that does not extend what its slot holds gets back only a context
checkpoint, or starts over; see tests/real_llama.py) except the one comparison:
- ``np1``: one slot, no host-memory cache (every switch of session starts over);
- ``np1_swa_full``: the same with ``--swa-full``, where a switch keeps the shared prefix;
- ``np3``: three slots, the server choosing a slot by prompt similarity;
- ``cache_ram``: one slot plus llama-server's host-memory prompt cache (``--cache-ram``);
- ``np4_pinned``: four slots, Luna pinning each session to one (``id_slot``,
  ``llm.pin_slots``) and keeping the fourth for background work.
Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.prefix_reuse import tool_output  # noqa: E402

SESSIONS = ("A", "B", "C")
CONFIGS: dict[str, dict[str, Any]] = {
    "np1": {"slots": 1, "cache_ram": 0, "pin": False},
    "np1_swa_full": {"slots": 1, "cache_ram": 0, "pin": False, "swa_full": True},
    "np3": {"slots": 3, "cache_ram": 0, "pin": False},
    "cache_ram": {"slots": 1, "cache_ram": 1024, "pin": False},
    "np4_pinned": {"slots": 4, "cache_ram": 0, "pin": True},
}
SLACK = 2


def replies(session: str, turn: int, lines: int) -> list[dict[str, Any]]:
    args = json.dumps({"service": f"{session}{turn}", "lines": lines})
    return [
        {
            "reasoning": f"Session {session}, turn {turn}: read the {session}{turn} log first.",
            "tool_calls": [{"name": "read_log", "arguments": args, "id": f"{session}{turn}"}],
        },
        {
            "reasoning": f"The {session}{turn} log is clean; answer in one line.",
            "content": f"{session}{turn} is healthy.",
        },
    ]


async def run_config(name: str, turns: int, lines: int, ctx: int) -> list[dict[str, Any]]:
    from luna.agent import Agent
    from luna.config import build_config
    from luna.llm import LLMClient
    from luna.memory import Memory
    from luna.messages import InboundMessage, TurnDone
    from luna.tools.registry import ToolRegistry
    from tests.fakes.llm_server import FakeLLMServer, Reply
    from tests.fakes.scripted_llama import Recorder, bench_config, on_real_server
    from tests.real_llama import RealLlama, model_path

    conf = CONFIGS[name]
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        real = RealLlama(
            model_path(base / "models"),
            base / "llama.log",
            template="luna",
            ctx=ctx * conf["slots"],
            slots=conf["slots"],
            cache_ram=conf["cache_ram"],
            swa_full=conf.get("swa_full", False),
        ).start()
        recorder = Recorder()
        rows: list[dict[str, Any]] = []
        try:
            with FakeLLMServer(n_ctx=ctx) as server:  # the scripted side sees one slot's room
                server.total_slots = conf["slots"]
                llm_cfg = {"endpoint": server.url, "model": server.model, "pin_slots": conf["pin"]}
                cfg = build_config(bench_config(base, llm_cfg), {}, base_dir=base)
                memory = Memory(cfg.memory)
                await memory.open(background=False, use_vectors=False)
                llm = LLMClient(cfg.llm)
                registry = ToolRegistry(cfg)

                @registry.tool(level="allow")
                async def read_log(service: str, lines: int = 100) -> str:
                    """Read a service's log.

                    Args:
                        service: the service name
                        lines: how many lines
                    """
                    return tool_output(sum(map(ord, service)) % 50, lines)

                agent = Agent(cfg, llm, memory, registry)
                try:
                    for turn in range(turns):
                        for session in SESSIONS:
                            start = len(recorder.steps)
                            server.script(
                                *(
                                    on_real_server(real, Reply(**r), recorder)
                                    for r in replies(session, turn, lines)
                                )
                            )
                            msg = InboundMessage(session, f"How is {session}{turn} doing?")
                            events = [e async for e in agent.run_turn(msg)]
                            if not isinstance(events[-1], TurnDone):
                                raise SystemExit(f"{name}: {session}{turn}: {events[-1]}")
                            for step in recorder.steps[start:]:
                                rows.append({"session": session, "step": step})
                finally:
                    await llm.close()
                    await memory.close()
            held: dict[str, str] = {}
            out = []
            for row in rows:
                s, step = row["session"], row["step"]
                before = real.tokenize(held[s]) if s in held else []
                prompt = real.tokenize(step.prompt)
                extends = prompt[: len(before)] == before
                out.append(
                    {
                        "session": s,
                        "prompt_tokens": step.prompt_tokens,
                        "cached_tokens": step.cached_tokens,
                        "prefilled_tokens": step.prefilled_tokens,
                        "new_tokens": len(prompt) - len(before) if extends else None,
                    }
                )
                held[s] = step.prompt + step.output
        finally:
            real.stop()
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    again = [
        max(0, r["prefilled_tokens"] - (r["new_tokens"] or 0) - SLACK)
        for r in rows
        if r["new_tokens"] is not None
    ]
    later = again[len(SESSIONS) :]  # each session's first request has nothing to reuse
    return {
        "requests": len(rows),
        "prefilled_tokens": sum(r["prefilled_tokens"] for r in rows),
        "prefilled_again_tokens": sum(again),
        "median_prefilled_again": statistics.median(later) if later else 0,
        "max_prefilled_again": max(later) if later else 0,
        "requests_with_old_prefilled": sum(1 for a in later if a > 0),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--lines", type=int, default=40)
    parser.add_argument("--ctx", type=int, default=8192, help="context per session (slot)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", nargs="*", choices=list(CONFIGS))
    args = parser.parse_args()
    if args.quick:
        args.turns, args.lines = 2, 20
    names = args.only or list(CONFIGS)
    results = {n: asyncio.run(run_config(n, args.turns, args.lines, args.ctx)) for n in names}
    figures = {n: summary(rows) for n, rows in results.items()}
    print(f"3 sessions interleaved, {args.turns} turns each, tool results of {args.lines} lines")
    print(f"{'config':<14}{'prefilled':>11}{'old again':>11}{'median':>8}{'max':>8}{'hit':>6}")
    for n, f in figures.items():
        print(
            f"{n:<14}{f['prefilled_tokens']:>11,}{f['prefilled_again_tokens']:>11,}"
            f"{f['median_prefilled_again']:>8,.0f}{f['max_prefilled_again']:>8,}"
            f"{f['requests_with_old_prefilled']:>4}/{f['requests'] - len(SESSIONS)}"
        )
    print(json.dumps({"benchmark": "slots", "turns": args.turns, "configs": figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
