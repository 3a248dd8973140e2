"""What each part of recall earns on LoCoMo: the shipped code with one part changed at a time.

Each variant sets some of recall's module constants (the shipped value is restored after it)
and runs ``bench/locomo.py``'s whole benchmark: all ten conversations, imported and searched
through the real ``Memory``. The table gives turn-level R@5 and R@10 on the tuning half (0-4)
and on the held-out half (5-9, never tuned on), and the query latency p50, beside the shipped
code's in the same run.

Usage: ``python bench/locomo_ablation.py [--variants NAME,NAME] [--quick]`` (``--quick``: the
shipped code and the code before episodes only). Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench import locomo  # noqa: E402

# name -> {"module.CONSTANT": value}; modules under luna.memory
VARIANTS: dict[str, dict[str, float]] = {
    "shipped": {},
    "no episodes (the code before)": {"recall.fusion.EPISODE_BOOST": 0.0},
    "episodes 0.5": {"recall.fusion.EPISODE_BOOST": 0.5},
    "no neighbours in vectors": {"storage.store.NEIGHBOUR_WEIGHT": 0.0},
    "neighbours in vectors 0.5": {"storage.store.NEIGHBOUR_WEIGHT": 0.5},
    "no neighbours in FTS": {"recall.search.CTX_WEIGHT": 0.0},
    "no speaker boost": {"recall.fusion.SPEAKER_BOOST": 0.0},
    "no date windows": {"recall.fusion.DATE_BOOST": 0.0},
    "no vector feedback": {"recall.search.PRF_BETA": 0.0},
    "FTS 0.4 / vectors 0.6": {"recall.fusion.FTS_WEIGHT": 0.4, "recall.fusion.VEC_WEIGHT": 0.6},
    "FTS 0.6 / vectors 0.4": {"recall.fusion.FTS_WEIGHT": 0.6, "recall.fusion.VEC_WEIGHT": 0.4},
}
QUICK = ("shipped", "no episodes (the code before)")


@contextlib.contextmanager
def constants(changes: dict[str, float]) -> Iterator[None]:
    """Set ``luna.memory.<module>.<NAME>`` values for the block, then put the shipped ones back."""
    saved = []
    try:
        for path, value in changes.items():
            module_name, _, name = path.rpartition(".")
            module = importlib.import_module(f"luna.memory.{module_name}")
            saved.append((module, name, getattr(module, name)))  # AttributeError: a typo
            setattr(module, name, value)
        yield
    finally:
        for module, name, value in reversed(saved):
            setattr(module, name, value)


async def run_variant(files: list[Path]) -> dict[str, float]:
    halves: dict[str, list[dict]] = {"tune": [], "held_out": []}
    latencies: list[float] = []
    for index, path in enumerate(files):
        rows, lats, _ = await locomo.run_conversation(path, max(locomo.KS))
        halves["tune" if index in locomo.TUNE else "held_out"] += [r for _, r in rows]
        latencies += lats
    out: dict[str, float] = {}
    for half, rows in halves.items():
        for cut in (5, 10):
            out[f"{half}_r{cut}"] = round(statistics.fmean(r[cut] for r in rows), 4)
    out["latency_ms_p50"] = round(locomo.percentile(latencies, 50), 2)
    return out


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=locomo.DEFAULT_DATA, help="LoCoMo folder")
    parser.add_argument("--variants", default="", help="comma-separated names (default: all)")
    parser.add_argument("--quick", action="store_true", help="shipped and no episodes only")
    args = parser.parse_args()
    names = list(QUICK) if args.quick else list(VARIANTS)
    if args.variants:
        names = [n.strip() for n in args.variants.split(",") if n.strip()]
        unknown = [n for n in names if n not in VARIANTS]
        if unknown:
            print(f"unknown variant(s) {unknown}; known: {list(VARIANTS)}", file=sys.stderr)
            return 2
    files = sorted(args.data.glob("*.json"))
    if len(files) != 10:
        print(f"need the ten LoCoMo conversations in {args.data}", file=sys.stderr)
        return 2
    results = {}
    head = f"{'variant':<32}{'tune R@5':>9}{'R@10':>7}{'held R@5':>10}{'R@10':>7}{'p50 ms':>8}"
    print(head)
    for name in names:
        with constants(VARIANTS[name]):
            r = results[name] = await run_variant(files)
        print(
            f"{name:<32}{r['tune_r5']:>9.3f}{r['tune_r10']:>7.3f}"
            f"{r['held_out_r5']:>10.3f}{r['held_out_r10']:>7.3f}{r['latency_ms_p50']:>8.1f}",
            flush=True,
        )
    print(json.dumps({"bench": "locomo_ablation", "variants": results}))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
