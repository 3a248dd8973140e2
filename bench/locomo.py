"""LoCoMo retrieval benchmark: evidence recall@1/5/10 of Luna's hybrid memory search.

For each LoCoMo conversation: a fresh database, every turn imported as a memory (text
``Speaker: utterance``, and a shared photo the way Luna indexes an image it has described:
``[image NAME: description]``, the dataset's BLIP caption as the description; external id = the
turn's ``dia_id``,
created_at = its session's date), then every question of categories 1-4 is searched (category 5,
adversarial, has no answer in the conversation and is left out), asked the day after the last
session (so "in May" means the last May before it). Recall@k of a question is the share of its
evidence turns found in the top k; the figures are means over questions.

Counted per session as well, to set beside published figures that rank sessions or chunks: the
sessions of the top k turns against the sessions that hold the question's evidence.

Conversations 0-4 (sorted file order) are for tuning and 5-9 are held out: never tune on them.
A run over all ten reports both halves apart, the held-out half as the figure to quote.

Usage: ``python bench/locomo.py [--data DIR] [--limit N | --only 0-4] [--k 10]``. Prints a
table and one JSON line. ``--only`` picks conversations by index.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from luna.config import MemoryConfig  # noqa: E402
from luna.memory import Memory  # noqa: E402
from luna.memory.storage.session_log import searchable_text  # noqa: E402
from luna.messages import Attachment  # noqa: E402

DEFAULT_DATA = REPO.parent / "shared" / "data" / "locomo10"
CATEGORIES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
KS = (1, 5, 10)
_EVIDENCE = re.compile(r"D\d+:\d+")
TUNE = frozenset(range(5))  # conversations tuned on; the rest are held out


def session_date(text: str) -> str:
    """'1:56 pm on 8 May, 2023' -> ISO 8601 (UTC)."""
    when = dt.datetime.strptime(text.strip(), "%I:%M %p on %d %B, %Y")
    return when.replace(tzinfo=dt.UTC).isoformat()


def turns(conv: dict, name: str = "") -> list[dict]:
    out = []
    n = 1
    while f"session_{n}_date_time" in conv:
        date = session_date(conv[f"session_{n}_date_time"])
        for turn in conv.get(f"session_{n}") or []:
            text = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                text = with_photo(text, turn)
            out.append(
                {
                    "text": text,
                    "id": turn["dia_id"],
                    "created_at": date,
                    "source": "import",
                    "speaker": turn["speaker"],
                    "session_id": f"locomo-{name}-session-{n}",
                }
            )
        n += 1
    return out


def with_photo(text: str, turn: dict) -> str:
    """A turn's text with its shared photo as Luna indexes an image it has described: the
    session log's searchable text, with the dataset's BLIP caption as the description."""
    urls = turn.get("img_url") or []
    name = urls[0].rsplit("/", 1)[-1].split("?")[0] if urls else "photo.jpg"
    photo = Attachment("image", "image/jpeg", name, 0, turn["dia_id"])
    return searchable_text(text, [photo], {photo.sha256: turn["blip_caption"]})


def parse_indexes(spec: str) -> set[int]:
    """'0-4,7' -> {0, 1, 2, 3, 4, 7}; raises ValueError on anything else."""
    out: set[int] = set()
    for part in spec.split(","):
        lo, _, hi = part.strip().partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def percentile(values: list[float], p: float) -> float:
    if not values:
        return 0.0
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]


def session_of(dia_id: str) -> str:
    """'D12:3' -> 'D12' (the LoCoMo session a turn belongs to)."""
    return dia_id.partition(":")[0]


def recall_at(evidence: set[str], ids: list[str]) -> dict[str, float]:
    """Turn- and session-level recall of one question at each cut."""
    sessions = {session_of(e) for e in evidence}
    out = {}
    for cut in KS:
        out[cut] = len(evidence & set(ids[:cut])) / len(evidence)
        out[f"s{cut}"] = len(sessions & {session_of(i) for i in ids[:cut]}) / len(sessions)
    return out


async def run_conversation(path: Path, k: int) -> tuple[list, list, int]:
    conv = json.loads(await asyncio.to_thread(path.read_text))
    rows: list[tuple[int, dict[int, float]]] = []
    latencies: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        mem = Memory(MemoryConfig(db_path=Path(tmp) / "locomo.db"))
        await mem.open(background=False)
        try:
            items = turns(conv, path.stem)
            await mem.add_memories(items)
            asked = dt.datetime.fromisoformat(max(i["created_at"] for i in items))
            asked += dt.timedelta(days=1)
            for qa in conv["qa"]:
                if qa.get("category") not in CATEGORIES:
                    continue
                evidence = set(_EVIDENCE.findall(" ".join(map(str, qa.get("evidence", [])))))
                if not evidence:
                    continue
                start = time.perf_counter()
                hits = await mem.recall(str(qa["question"]), k=k, now=asked)
                latencies.append((time.perf_counter() - start) * 1000)
                ids = [h.external_id or "" for h in hits]
                rows.append((qa["category"], recall_at(evidence, ids)))
        finally:
            await mem.close()
    return rows, latencies, len(items)


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo folder")
    parser.add_argument("--limit", type=int, default=0, help="only the first N conversations")
    parser.add_argument(
        "--only", default="", help="conversation indexes, e.g. '0-4' or '5,7,9' (sorted order)"
    )
    parser.add_argument("--k", type=int, default=10, help="results per search")
    parser.add_argument("--quick", action="store_true", help="the first 2 conversations only")
    args = parser.parse_args()
    if args.quick and not args.limit:
        args.limit = 2
    files = sorted(args.data.glob("*.json"))
    if not files:
        print(f"no LoCoMo conversations in {args.data}", file=sys.stderr)
        return 2
    if args.only:
        try:
            wanted = parse_indexes(args.only)
        except ValueError:
            print(f"bad --only {args.only!r}: use e.g. 0-4 or 5,7,9", file=sys.stderr)
            return 2
        files = [f for i, f in enumerate(files) if i in wanted]
    if args.limit:
        files = files[: args.limit]
    index_of = {f: i for i, f in enumerate(sorted(args.data.glob("*.json")))}
    all_rows: list[tuple[int, dict]] = []
    halves: dict[str, list[tuple[int, dict]]] = {"tune": [], "held_out": []}
    latencies: list[float] = []
    n_turns = 0
    for path in files:
        rows, lats, n = await run_conversation(path, max(args.k, max(KS)))
        all_rows += rows
        halves["tune" if index_of[path] in TUNE else "held_out"] += rows
        latencies += lats
        n_turns += n

    def mean_at(rows: list, cut: int | str) -> float:
        return statistics.fmean(r[cut] for _, r in rows) if rows else 0.0

    def figures(rows: list) -> dict:
        return {
            "questions": len(rows),
            **{f"recall@{cut}": round(mean_at(rows, cut), 4) for cut in KS},
            **{f"session_recall@{cut}": round(mean_at(rows, f"s{cut}"), 4) for cut in KS},
        }

    result = {
        "bench": "locomo",
        "conversations": len(files),
        "only": args.only or None,
        "turns": n_turns,
        "questions": len(all_rows),
        **{f"recall@{cut}": round(mean_at(all_rows, cut), 4) for cut in KS},
        **{f"session_recall@{cut}": round(mean_at(all_rows, f"s{cut}"), 4) for cut in KS},
        "halves": {name: figures(rows) for name, rows in halves.items() if rows},
        "per_category": {
            name: {
                "questions": len(sub := [r for r in all_rows if r[0] == cat]),
                **{f"recall@{cut}": round(mean_at(sub, cut), 4) for cut in KS},
            }
            for cat, name in CATEGORIES.items()
        },
        "latency_ms_p50": round(percentile(latencies, 50), 2),
        "latency_ms_p95": round(percentile(latencies, 95), 2),
    }
    print(f"LoCoMo: {len(files)} conversations, {n_turns} turns, {len(all_rows)} questions")
    print(f"{'category':<14}{'n':>6}{'R@1':>8}{'R@5':>8}{'R@10':>8}")
    for name, vals in result["per_category"].items():
        print(
            f"{name:<14}{vals['questions']:>6}"
            + "".join(f"{vals[f'recall@{c}']:>8.3f}" for c in KS)
        )
    print(
        f"{'overall':<14}{len(all_rows):>6}" + "".join(f"{result[f'recall@{c}']:>8.3f}" for c in KS)
    )
    print(
        f"{'  per session':<14}{'':>6}"
        + "".join(f"{result[f'session_recall@{c}']:>8.3f}" for c in KS)
    )
    for name, vals in result["halves"].items():
        label = "tune 0-4" if name == "tune" else "held-out 5-9"
        print(
            f"{label:<14}{vals['questions']:>6}"
            + "".join(f"{vals[f'recall@{c}']:>8.3f}" for c in KS)
            + "   per session "
            + " ".join(f"{vals[f'session_recall@{c}']:.3f}" for c in KS)
        )
    print(f"query latency p50 {result['latency_ms_p50']} ms, p95 {result['latency_ms_p95']} ms")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
