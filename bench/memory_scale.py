"""Memory scale benchmark: ingest rate, recall latency at LoCoMo size and at N memories, RSS.

Measures, on real SQLite files in a temporary folder with the packaged MiniLM model:
1. logged ingest: ``append_message`` one message at a time, alternating user messages (a durable
   commit, one fsync each) and replies (committed, then a background fsync); FTS indexed at
   once, vectors by the indexer — messages/s;
2. batched ingest with embeddings: ``add_memories`` in batches of 256 (encode + write) —
   messages/s;
3. recall latency (query embedding + hybrid search) p50/p95 on a LoCoMo-sized store (one
   conversation, ~600 turns) and on a store of ``--n`` memories (default 100,000). The large
   store reuses LoCoMo turns: each text gets a distinct suffix and its vector a small random
   perturbation, so term statistics and vector geometry stay realistic without encoding 100k
   texts on a CPU for twenty minutes;
   then, on the large store, the same recalls with every full vector scanned instead of the
   sketch (``luna.memory.storage.vector_index``), and how much they agree: the sketch's vector
   recall@100 against the exact scan, the share of the exact search's top 10 that the
   sketch's recall returns too, and the LoCoMo evidence recall@10 of each;
4. peak RSS of the process.

Usage: ``python bench/memory_scale.py [--n 100000] [--queries 200] [--data DIR]``. Prints a
table and one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from locomo import _EVIDENCE, DEFAULT_DATA, turns  # noqa: E402

from luna.config import MemoryConfig  # noqa: E402
from luna.memory import Memory  # noqa: E402
from luna.memory.embedding.embed_worker import EmbeddingProcess  # noqa: E402
from luna.memory.embedding.model_cache import cache_dir_for  # noqa: E402

BATCH = 256


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))] if values else 0.0


async def timed_recalls(mem: Memory, queries: list[str]) -> tuple[list[float], list[list[str]]]:
    """Each recall's time (ms) and the external ids of the docs it returned."""
    times, found = [], []
    for q in queries:
        start = time.perf_counter()
        items = await mem.recall(q, k=10)
        times.append((time.perf_counter() - start) * 1000)
        found.append([it.external_id or "" for it in items])
    return times, found


def overlap(a: list[list[str]], b: list[list[str]]) -> float:
    """Mean share of each list of ``a`` that its list in ``b`` holds too."""
    shares = [len(set(x) & set(y)) / len(x) for x, y in zip(a, b, strict=True) if x]
    return statistics.mean(shares) if shares else 1.0


def load_corpus(data: Path) -> tuple[list[list[dict]], list[str], list[set[str]]]:
    """LoCoMo's conversations (turns), questions, and each question's evidence turns as
    ``conversation/dia_id``."""
    convs, questions, evidence = [], [], []
    for path in sorted(data.glob("*.json")):
        conv = json.loads(path.read_text())
        convs.append([{**t, "id": f"{path.stem}/{t['id']}"} for t in turns(conv, path.stem)])
        for qa in conv["qa"]:
            if qa.get("category") != 5:
                questions.append(str(qa["question"]))
                found = _EVIDENCE.findall(" ".join(map(str, qa.get("evidence", []))))
                evidence.append({f"{path.stem}/{e}" for e in found})
    if not convs:
        raise SystemExit(f"no LoCoMo conversations in {data}")
    return convs, questions, evidence


def evidence_recall(found: list[list[str]], evidence: list[set[str]]) -> float:
    """Mean share of each question's evidence turns among its recalled docs (any copy)."""
    shares = [
        len(want & {doc.split("#")[0] for doc in got}) / len(want)
        for got, want in zip(found, evidence, strict=True)
        if want
    ]
    return statistics.mean(shares) if shares else 0.0


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="memories in the large store")
    parser.add_argument("--queries", type=int, default=200, help="recalls per latency test")
    parser.add_argument("--ingest", type=int, default=1000, help="messages per ingest test")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo folder")
    parser.add_argument("--quick", action="store_true", help="20,000 memories, 100 queries")
    args = parser.parse_args()
    if args.quick:
        args.n, args.queries, args.ingest = 20_000, 100, 500
    convs, questions, evidence = await asyncio.to_thread(load_corpus, args.data)
    questions, evidence = questions[: args.queries], evidence[: args.queries]
    all_turns = [t for c in convs for t in c]
    result: dict[str, object] = {"bench": "memory_scale"}

    with tempfile.TemporaryDirectory() as tmp:
        # The same embedding child process Luna uses, with its model cache in this run's data
        # folder (exported once, here, untimed); this process never loads torch itself.
        embedder = EmbeddingProcess.shared(
            "all-MiniLM-L6-v2", 384, cache_dir=cache_dir_for(Path(tmp) / "log.db")
        )
        await embedder.load()
        # 1. durable append, one message per transaction
        mem = Memory(MemoryConfig(db_path=Path(tmp) / "log.db"))
        await mem.open(background=False)
        texts = [t["text"] for t in all_turns[: args.ingest]]
        start = time.perf_counter()
        for i, text in enumerate(texts):
            role = "user" if i % 2 == 0 else "assistant"
            await mem.append_message("bench", {"role": role, "content": text})
        result["append_durable_msgs_per_s"] = round(len(texts) / (time.perf_counter() - start))
        start = time.perf_counter()
        await mem.flush_index()
        result["indexer_embed_msgs_per_s"] = round(len(texts) / (time.perf_counter() - start))
        await mem.close()

        # 2. batched ingest with embeddings
        mem = Memory(MemoryConfig(db_path=Path(tmp) / "batch.db"))
        await mem.open(background=False)
        records = [dict(t) for t in all_turns[: args.ingest]]
        start = time.perf_counter()
        for i in range(0, len(records), BATCH):
            await mem.add_memories(records[i : i + BATCH])
        result["batch_ingest_msgs_per_s"] = round(len(records) / (time.perf_counter() - start))
        await mem.close()

        # 3a. recall at LoCoMo size (the largest single conversation)
        conv = max(convs, key=len)
        mem = Memory(MemoryConfig(db_path=Path(tmp) / "locomo.db"))
        await mem.open(background=False)
        await mem.add_memories(conv)
        lat, _ = await timed_recalls(mem, questions)
        result["locomo_size_docs"] = len(conv)
        result["locomo_recall_ms_p50"] = round(statistics.median(lat), 2)
        result["locomo_recall_ms_p95"] = round(pct(lat, 95), 2)
        await mem.close()

        # 3b. recall with --n memories
        base_vecs = await embedder.encode([t["text"] for t in all_turns])
        rng = np.random.default_rng(7)
        mem = Memory(MemoryConfig(db_path=Path(tmp) / "big.db"))
        await mem.open(background=False)
        start = time.perf_counter()
        for lo in range(0, args.n, 5000):
            idx = np.arange(lo, min(args.n, lo + 5000)) % len(all_turns)
            recs = []
            for j, i in enumerate(idx):
                t = dict(all_turns[i])
                t["text"] = f"{t['text']} (note {lo + j})"
                t["id"] = f"{t['id']}#{lo + j}"
                recs.append(t)
            vecs = base_vecs[idx] + rng.normal(0, 0.02, (len(idx), base_vecs.shape[1]))
            vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
            await mem.add_memories(recs, vectors=vecs)
        result["large_store_docs"] = args.n
        result["large_store_write_s"] = round(time.perf_counter() - start, 1)
        await mem.recall("warm up the caches", k=10)
        lat, sketched = await timed_recalls(mem, questions)
        result["large_recall_ms_p50"] = round(statistics.median(lat), 2)
        result["large_recall_ms_p95"] = round(pct(lat, 95), 2)

        # 3c. the same store and queries with every full vector scanned (no sketch), and how
        # much the two searches agree
        index = mem.store.ram_index("owner")
        if index is not None and index.basis is not None:
            qvecs = [np.frombuffer(await mem.embed_query(q) or b"", np.float32) for q in questions]
            hits = [
                len({i for i, _ in index.knn(q, 100)} & {i for i, _ in index.exact(q, 100)}) / 100
                for q in qvecs
            ]
            result["sketch_vector_recall_at_100"] = round(statistics.mean(hits), 4)
            index.clear_sketch()
            lat, exact = await timed_recalls(mem, questions)
            index.fit()
            result["exact_scan_recall_ms_p50"] = round(statistics.median(lat), 2)
            result["exact_scan_recall_ms_p95"] = round(pct(lat, 95), 2)
            result["sketch_top10_same_as_exact"] = round(overlap(exact, sketched), 4)
            result["sketch_evidence_r10"] = round(evidence_recall(sketched, evidence), 4)
            result["exact_scan_evidence_r10"] = round(evidence_recall(exact, evidence), 4)
        result["large_db_mb"] = round((Path(tmp) / "big.db").stat().st_size / 1e6, 1)
        await mem.close()

    result["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    rows = [
        ("append (1 msg/commit)", f"{result['append_durable_msgs_per_s']} msg/s"),
        ("background embedding", f"{result['indexer_embed_msgs_per_s']} msg/s"),
        ("batched ingest incl. embeddings", f"{result['batch_ingest_msgs_per_s']} msg/s"),
        (
            f"recall p50/p95 @ {result['locomo_size_docs']} docs",
            f"{result['locomo_recall_ms_p50']} / {result['locomo_recall_ms_p95']} ms",
        ),
        (
            f"recall p50/p95 @ {args.n} docs",
            f"{result['large_recall_ms_p50']} / {result['large_recall_ms_p95']} ms",
        ),
        (
            "  same, every vector scanned (no sketch)",
            f"{result.get('exact_scan_recall_ms_p50')} / "
            f"{result.get('exact_scan_recall_ms_p95')} ms",
        ),
        ("  sketch: vector recall@100 vs exact", f"{result.get('sketch_vector_recall_at_100')}"),
        ("  sketch: top-10 recalled as exact", f"{result.get('sketch_top10_same_as_exact')}"),
        (
            "  LoCoMo evidence R@10, sketch / exact",
            f"{result.get('sketch_evidence_r10')} / {result.get('exact_scan_evidence_r10')}",
        ),
        ("large store size", f"{result['large_db_mb']} MB"),
        ("peak RSS", f"{result['peak_rss_mb']} MB"),
    ]
    for name, value in rows:
        print(f"{name:<36}{value:>24}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
