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
   the large store's recalls run three ways in the same run: through the graph (HNSW,
   ``luna.memory.storage.graph_index``, what Luna uses past 50,000 docs), through the sketch
   scan that served before it, and with every full vector scanned; and how much they agree:
   vector recall@10 (graph) and @100 (sketch) against the exact scan, the share of the exact
   search's top 10 that each recall returns too, and the LoCoMo evidence recall@10 of each;
4. the graph alone at ``--graph-sizes`` vectors (default 100,000 and 1,000,000, LoCoMo vectors
   perturbed as above): build time on one thread, RAM, search p50 and recall@10 against the
   exact scan;
5. peak RSS of the process.

Usage: ``python bench/memory_scale.py [--n 100000] [--queries 200] [--graph-sizes 100000,1000000]
[--data DIR]``. Prints a table and one JSON line.
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
from luna.memory.storage import graph_index  # noqa: E402
from luna.memory.storage.vector_index import VectorIndex  # noqa: E402

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


def perturbed(base: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` unit vectors, each a LoCoMo turn's with a little noise (as the large store's)."""
    out = np.empty((n, base.shape[1]), dtype=np.float32)
    for lo in range(0, n, 50_000):
        idx = np.arange(lo, min(n, lo + 50_000)) % len(base)
        vecs = base[idx] + rng.normal(0, 0.02, (len(idx), base.shape[1]))
        out[lo : lo + len(idx)] = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
    return out


def graph_alone(base: np.ndarray, queries: np.ndarray, n: int) -> dict[str, float]:
    """Build the graph over ``n`` vectors in a VectorIndex as Luna does; time, RAM, recall."""
    vecs = perturbed(base, n, np.random.default_rng(11))
    index = VectorIndex(base.shape[1])
    for i, v in enumerate(vecs):
        index.upsert(i + 1, v)
    del vecs
    start = time.perf_counter()
    if not index.wait_for_graph():
        return {"docs": n}
    build_s = time.perf_counter() - start
    lat, shares = [], []
    for q in queries:
        t0 = time.perf_counter()
        got = index.knn(q, 10)
        lat.append((time.perf_counter() - t0) * 1000)
        shares.append(len({i for i, _ in got} & {i for i, _ in index.exact(q, 10)}) / 10)
    assert index.graph is not None
    return {
        "docs": n,
        "build_s": round(build_s, 1),
        "graph_mb": round(index.graph.nbytes / 1e6, 1),
        "vectors_mb": round(index.mat.nbytes / 1e6, 1),
        "knn_ms_p50": round(statistics.median(lat), 3),
        "recall_at_10": round(statistics.mean(shares), 4),
    }


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="memories in the large store")
    parser.add_argument("--queries", type=int, default=200, help="recalls per latency test")
    parser.add_argument("--ingest", type=int, default=1000, help="messages per ingest test")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="LoCoMo folder")
    parser.add_argument(
        "--graph-sizes", default="100000,1000000", help="vectors for the graph alone (4.)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="60,000 memories, 100 queries, graph at 60,000"
    )
    args = parser.parse_args()
    if args.quick:
        args.n, args.queries, args.ingest, args.graph_sizes = 60_000, 100, 500, "60000"
    graph_sizes = [int(x) for x in args.graph_sizes.split(",") if x.strip()]
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
        await mem.recall("warm up the caches", k=10)  # loads the RAM index, starts the graph
        index = mem.store.ram_index("owner")
        start = time.perf_counter()
        if index is not None and index.wait_for_graph():
            result["large_graph_build_s"] = round(time.perf_counter() - start, 1)
        lat, graphed = await timed_recalls(mem, questions)
        result["large_recall_ms_p50"] = round(statistics.median(lat), 2)
        result["large_recall_ms_p95"] = round(pct(lat, 95), 2)

        # 3c. the same store and queries through the sketch (before the graph), then with
        # every full vector scanned, and how much the searches agree
        if index is not None and index.basis is not None:
            qvecs = [np.frombuffer(await mem.embed_query(q) or b"", np.float32) for q in questions]
            exact10 = [{i for i, _ in index.exact(q, 10)} for q in qvecs]
            if index.graph is not None:
                result["graph_vector_recall_at_10"] = round(
                    statistics.mean(
                        len({i for i, _ in index.knn(q, 10)} & e) / 10
                        for q, e in zip(qvecs, exact10, strict=True)
                    ),
                    4,
                )
            index.use_graph = False
            hits = [
                len({i for i, _ in index.knn(q, 100)} & {i for i, _ in index.exact(q, 100)}) / 100
                for q in qvecs
            ]
            result["sketch_vector_recall_at_100"] = round(statistics.mean(hits), 4)
            lat, sketched = await timed_recalls(mem, questions)
            result["sketch_recall_ms_p50"] = round(statistics.median(lat), 2)
            result["sketch_recall_ms_p95"] = round(pct(lat, 95), 2)
            index.clear_sketch()
            lat, exact = await timed_recalls(mem, questions)
            index.fit()
            index.use_graph = True
            result["exact_scan_recall_ms_p50"] = round(statistics.median(lat), 2)
            result["exact_scan_recall_ms_p95"] = round(pct(lat, 95), 2)
            result["graph_top10_same_as_exact"] = round(overlap(exact, graphed), 4)
            result["sketch_top10_same_as_exact"] = round(overlap(exact, sketched), 4)
            result["graph_evidence_r10"] = round(evidence_recall(graphed, evidence), 4)
            result["sketch_evidence_r10"] = round(evidence_recall(sketched, evidence), 4)
            result["exact_scan_evidence_r10"] = round(evidence_recall(exact, evidence), 4)
        result["large_db_mb"] = round((Path(tmp) / "big.db").stat().st_size / 1e6, 1)
        await mem.close()

        # 4. the graph alone, at each size
        if graph_index.available():
            base = np.asarray(base_vecs, dtype=np.float32)
            qv = np.asarray(await embedder.encode(questions, is_query=True), dtype=np.float32)
            result["graph_alone"] = [graph_alone(base, qv, n) for n in graph_sizes]

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
            "  same through the sketch (before)",
            f"{result.get('sketch_recall_ms_p50')} / {result.get('sketch_recall_ms_p95')} ms",
        ),
        (
            "  same, every vector scanned",
            f"{result.get('exact_scan_recall_ms_p50')} / "
            f"{result.get('exact_scan_recall_ms_p95')} ms",
        ),
        ("  graph built in the background", f"{result.get('large_graph_build_s')} s"),
        ("  graph: vector recall@10 vs exact", f"{result.get('graph_vector_recall_at_10')}"),
        ("  sketch: vector recall@100 vs exact", f"{result.get('sketch_vector_recall_at_100')}"),
        (
            "  top-10 recalled as exact: graph / sketch",
            f"{result.get('graph_top10_same_as_exact')} / "
            f"{result.get('sketch_top10_same_as_exact')}",
        ),
        (
            "  LoCoMo evidence R@10 graph/sketch/exact",
            f"{result.get('graph_evidence_r10')} / {result.get('sketch_evidence_r10')} / "
            f"{result.get('exact_scan_evidence_r10')}",
        ),
        ("large store size", f"{result['large_db_mb']} MB"),
        ("peak RSS", f"{result['peak_rss_mb']} MB"),
    ]
    for g in result.get("graph_alone", []):  # type: ignore[union-attr]
        rows.append(
            (
                f"graph alone @ {g['docs']:,} vectors",
                f"build {g.get('build_s')} s, {g.get('graph_mb')} MB, "
                f"{g.get('knn_ms_p50')} ms, R@10 {g.get('recall_at_10')}",
            )
        )
    for name, value in rows:
        print(f"{name:<40}{value:>44}")
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
