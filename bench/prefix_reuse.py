"""KV-cache reuse on the real llama-server, in tokens: ``python bench/prefix_reuse.py [--quick]``

Drives the real Agent (real Memory, a real tool returning several KB) through a session of user
turns with tool rounds, against the real C++ llama-server rendering Qwen3.5's chat template
(Gemma 3 270M weights). The model's words are scripted (tests/fakes/scripted_llama.py); the
server renders every request, and holds each request plus the scripted reply in its KV cache
exactly as after a real generation. For every request it reports prompt tokens, cached tokens
(``timings.cache_n``), prefilled tokens, and tokens prefilled again: prefilled minus what is
new since the previous request (new messages plus the template's wrapping; measured on the
variant whose requests extend the cache exactly, and the same for every variant, which run
the same script).

The server follows the production model's caching rules (no ``--swa-full``, see
tests/real_llama.py): a request that does not extend what the slot holds gets back only a
context checkpoint, or starts over. A slow MCP server (it answers nothing for its first
second) is configured in every variant, as the shipped ``time`` server is.

Variants, each in its own process, in the same run:
- ``previous``: the code before reasoning was kept and replayed (commit ``BASELINE``),
  with Qwen3.5's stock template;
- ``head-before``: the code before a session's head was fixed (commit ``HEAD_BEFORE``): the
  MCP server's tools join the tool list once it is up, under the running session;
- ``stock``: this code (``llm.history_reasoning = "keep"``) with the stock template;
- ``luna``: this code with luna/llm/templates/qwen3.5-luna.jinja (what worker-agent.service
  runs), which keeps the reasoning of every turn;
- ``luna-swa-full``: the same with ``--swa-full``, which makes every rollback free (for
  comparison: it hides what the production model pays).
Goals for ``luna``: nothing old prefilled again; median share prefilled again ≤ 5%.

Prints a table, then one JSON line.
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
BASELINE = "aac7ca3"  # the last commit before reasoning was persisted and replayed
HEAD_BEFORE = "a510720"  # the last commit before the session's head was fixed
# name -> (template, code, --swa-full)
VARIANTS = {
    "previous": ("stock", BASELINE, False),
    "head-before": ("luna", HEAD_BEFORE, False),
    "stock": ("stock", None, False),
    "luna": ("luna", None, False),
    "luna-swa-full": ("luna", None, True),
}
SLOW_MCP = {  # the test suite's echo server, slow to start
    "command": sys.executable,
    "args": [str(ROOT / "tests" / "mcp" / "servers" / "echo_server.py")],
    "env": {"ECHO_START_DELAY": "1"},
}
GOAL_MEDIAN_SHARE = 0.05
SLACK = 2  # tokens always evaluated again (the last prompt token; BOS bookkeeping)
CTX = 32768  # one slot, room for the full run without trimming (trimming would move the prefix)


def tool_output(turn: int, lines: int) -> str:
    return "\n".join(
        f"{turn:02d}:{i:04d} INFO worker-{i % 7} processed batch {i * 37 % 1000} in {i % 97} ms"
        for i in range(lines)
    )


def script(turns: int, lines: int) -> list[list[dict[str, Any]]]:
    """Per turn, the scripted replies: one or two tool rounds, then an answer."""
    out = []
    for t in range(turns):
        rounds = 2 if t % 3 == 1 else 1
        replies: list[dict[str, Any]] = []
        for r in range(rounds):
            args = json.dumps({"service": f"svc{t}", "lines": lines, "page": r})
            replies.append(
                {
                    "reasoning": (
                        f"Turn {t}: the user asks how svc{t} is doing. I should read page {r} "
                        "of its log with read_log, then look for errors, slow batches and "
                        "anything unusual before I answer."
                    ),
                    "tool_calls": [{"name": "read_log", "arguments": args, "id": f"t{t}r{r}"}],
                }
            )
        replies.append(
            {
                "reasoning": (
                    f"The log of svc{t} shows steady batches, no errors and no slow outliers; "
                    "a one-line summary is enough."
                ),
                "content": f"svc{t} processed its batches normally; nothing failed.",
            }
        )
        out.append(replies)
    return out


# ---- one variant (runs in its own process) ---------------------------------------------------


def use_code(path: str | None) -> None:
    """Make ``import luna`` load the code at ``path`` from now on (None: this checkout).

    The harness modules, imported before, keep the functions they bound from this checkout's
    luna; only the agent under test is the other version.
    """
    import tests.fakes.scripted_llama  # bound to this checkout first
    import tests.real_llama  # noqa: F401

    if path is None:
        return
    for name in [m for m in sys.modules if m == "luna" or m.startswith("luna.")]:
        del sys.modules[name]
    sys.path.insert(0, path)


def mcp_manager() -> Any:
    """The MCPManager class of the code under test (``luna/mcp_manager.py`` before the
    package layout)."""
    try:
        from luna.mcp.manager import MCPManager
    except ImportError:
        from luna.mcp_manager import MCPManager  # type: ignore[no-redef]
    return MCPManager


async def run_variant(
    template: str, turns: int, lines: int, keep: bool, swa_full: bool
) -> dict[str, Any]:
    from luna.agent import Agent
    from luna.config import build_config
    from luna.llm import LLMClient
    from luna.memory import Memory
    from luna.messages import InboundMessage, TurnDone
    from luna.tools.registry import ToolRegistry
    from tests.fakes.llm_server import FakeLLMServer, Reply
    from tests.fakes.scripted_llama import Recorder, bench_config, on_real_server
    from tests.real_llama import RealLlama, model_path

    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        cache = Path(os.environ.get("LUNA_BENCH_MODELS", base / "models"))
        real = RealLlama(
            model_path(cache), base / "llama.log", template=template, ctx=CTX, swa_full=swa_full
        )
        real.start()
        (base / "mcp.json").write_text(json.dumps({"servers": {"echo": SLOW_MCP}}))
        recorder = Recorder()
        try:
            # The scripted server's context matches the real one's, so no variant is trimmed.
            with FakeLLMServer(n_ctx=CTX) as server:
                llm_cfg: dict[str, Any] = {"endpoint": server.url, "model": server.model}
                if keep:
                    llm_cfg["history_reasoning"] = "keep"
                data = bench_config(base, llm_cfg)
                data["mcp"] = {"servers_file": str(base / "mcp.json")}
                cfg = build_config(data, {}, base_dir=base)
                memory = Memory(cfg.memory)
                await memory.open(background=False, use_vectors=False)
                llm = LLMClient(cfg.llm)
                registry = ToolRegistry(cfg)

                @registry.tool(level="allow")
                async def read_log(service: str, lines: int = 100, page: int = 0) -> str:
                    """Read a page of a service's log.

                    Args:
                        service: the service name
                        lines: how many lines
                        page: which page
                    """
                    return tool_output(int(service.removeprefix("svc") or 0) + page, lines)

                mcp = mcp_manager()(cfg, registry)
                await mcp.start()  # in the background, as app.py starts it
                agent = Agent(cfg, llm, memory, registry)
                try:
                    for t, replies in enumerate(script(turns, lines)):
                        server.script(
                            *(on_real_server(real, Reply(**r), recorder) for r in replies)
                        )
                        text = f"Turn {t}: how is svc{t} doing? Check its log."
                        events = [e async for e in agent.run_turn(InboundMessage("bench", text))]
                        if not isinstance(events[-1], TurnDone):
                            raise SystemExit(f"turn {t} failed: {events[-1]}")
                finally:
                    await mcp.stop()
                    await llm.close()
                    await memory.close()
            steps = []
            for s in recorder.steps:
                held = real.tokenize(s.held_before) if s.held_before else []
                prompt = real.tokenize(s.prompt)
                steps.append(
                    {
                        "prompt_tokens": s.prompt_tokens,
                        "cached_tokens": s.cached_tokens,
                        "prefilled_tokens": s.prefilled_tokens,
                        "extends": prompt[: len(held)] == held if held else None,
                        "growth_tokens": len(prompt) - len(held),
                    }
                )
        finally:
            real.stop()
    return {"template": template, "steps": steps}


def variant_main(args: argparse.Namespace) -> int:
    template, _, swa_full = VARIANTS[args.variant]
    use_code(os.environ.get("LUNA_BENCH_CODE"))
    keep = args.variant != "previous"  # the previous code has no such setting
    result = asyncio.run(run_variant(template, args.turns, args.lines, keep, swa_full))
    print(json.dumps(result))
    return 0


# ---- the orchestrator ------------------------------------------------------------------------


def baseline_tree(ref: str) -> Path:
    """The previous code's ``luna`` package, exported once under the cache."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "luna" / "bench"
    target = cache / f"code-{ref}"
    if not (target / "luna" / "__init__.py").exists():
        target.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "archive", ref, "luna"], cwd=ROOT, capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    return target


def spawn(variant: str, turns: int, lines: int) -> dict[str, Any]:
    _, ref, _ = VARIANTS[variant]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    env.pop("LUNA_BENCH_CODE", None)
    if ref:  # the harness (tests/, bench/) is this checkout's; the agent is the old one
        env["LUNA_BENCH_CODE"] = str(baseline_tree(ref))
    cmd = [sys.executable, __file__, "--variant", variant, "--turns", str(turns)]
    proc = subprocess.run(
        [*cmd, "--lines", str(lines)], env=env, capture_output=True, text=True, timeout=3600
    )
    if proc.returncode != 0:
        raise SystemExit(f"variant {variant} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def summarise(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    reference = runs["luna"]["steps"]
    if not all(s["extends"] in (True, None) for s in reference):
        raise SystemExit("the reference variant does not extend the cache: no 'new' baseline")
    new = [s["growth_tokens"] for s in reference]
    out: dict[str, Any] = {}
    for name, run in runs.items():
        steps = run["steps"]
        again = [max(0, s["prefilled_tokens"] - n - SLACK) for s, n in zip(steps, new, strict=True)]
        shares = [a / s["prompt_tokens"] for a, s in zip(again[1:], steps[1:], strict=True)]
        out[name] = {
            "requests": len(steps),
            "prompt_tokens": sum(s["prompt_tokens"] for s in steps),
            "prefilled_tokens": sum(s["prefilled_tokens"] for s in steps),
            "prefilled_again_tokens": sum(again),
            "median_share_prefilled_again": round(statistics.median(shares), 4),
            "max_prefilled_again": max(again),
            "final_prompt_tokens": steps[-1]["prompt_tokens"],
            "per_request": [
                {**s, "new_tokens": n, "prefilled_again": a}
                for s, n, a in zip(steps, new, again, strict=True)
            ],
        }
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=10, help="user turns (default 10)")
    parser.add_argument("--lines", type=int, default=60, help="lines per tool result (~4 KB)")
    parser.add_argument("--quick", action="store_true", help="4 turns, smaller tool results")
    parser.add_argument("--variant", choices=list(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="*", choices=list(VARIANTS), help="run only these")
    args = parser.parse_args()
    if args.quick:
        args.turns, args.lines = min(args.turns, 4), min(args.lines, 30)
    if args.variant:
        return variant_main(args)
    names = args.only or list(VARIANTS)
    if "luna" not in names:
        names.append("luna")  # the reference for "new tokens"
    runs = {name: spawn(name, args.turns, args.lines) for name in names}
    figures = summarise(runs)
    luna = figures["luna"]
    print(f"KV-cache reuse on the real llama-server: {args.turns} turns, tool results of "
          f"{args.lines} lines (~{len(tool_output(0, args.lines)) // 1000} KB)")  # fmt: skip
    print()
    print("tokens prefilled per request, and of them old tokens prefilled again ('again')")
    header = f"{'req':>4} " + "".join(f"{n:>15}{'again':>7}" for n in figures)
    print(header + f"{'prompt (luna)':>15}{'new':>7}")
    for i in range(luna["requests"]):
        cells = "".join(
            f"{f['per_request'][i]['prefilled_tokens']:>15,}"
            f"{f['per_request'][i]['prefilled_again']:>7,}"
            for f in figures.values()
        )
        row = luna["per_request"][i]
        print(f"{i + 1:>4} {cells}{row['prompt_tokens']:>15,}{row['new_tokens']:>7,}")
    print()
    for name, f in figures.items():
        print(
            f"{name:<13} prefilled {f['prefilled_tokens']:>8,} tokens, of them old again "
            f"{f['prefilled_again_tokens']:>7,}; median share again "
            f"{f['median_share_prefilled_again']:.1%}; final prompt {f['final_prompt_tokens']:,}"
        )
    avoided = figures.get("stock", luna)["prefilled_tokens"] - luna["prefilled_tokens"]
    extra = luna["final_prompt_tokens"] - figures.get("stock", luna)["final_prompt_tokens"]
    print(f"\nkeeping every turn's reasoning: {extra:+,} context tokens at the end, "
          f"{avoided:,} prefilled tokens avoided (vs the stock template)")  # fmt: skip
    passed = (
        luna["max_prefilled_again"] == 0
        and luna["median_share_prefilled_again"] <= GOAL_MEDIAN_SHARE
    )
    result = {
        "benchmark": "prefix_reuse",
        "turns": args.turns,
        "tool_result_lines": args.lines,
        "baseline": BASELINE,
        "goal_median_share": GOAL_MEDIAN_SHARE,
        "pass": passed,
        "context_tokens_spent": extra,
        "prefill_tokens_avoided": avoided,
        **{name: {k: v for k, v in f.items() if k != "per_request"} for name, f in figures.items()},
        "per_request": {name: f["per_request"] for name, f in figures.items()},
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
