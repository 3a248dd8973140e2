"""The model cache: later starts load the export without torch, vectors survive a cold restart
unchanged, entries are keyed and published atomically, and switching needs no reindex."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from luna.config import MemoryConfig
from luna.memory import Memory
from luna.memory.embedding import model_cache as cache
from luna.memory.embedding.embed_worker import EmbeddingProcess
from luna.memory.embedding.embeddings import Embedder
from tests.luna_process import REPO, clean_env

MODEL = "all-MiniLM-L6-v2"
TEXTS = ["we moved to Lisbon in March", "the tulip bulbs arrive on Friday", "x"]

FRESH_PROCESS = """
import json, sys
from pathlib import Path
from luna.memory.embedding.embeddings import Embedder
emb = Embedder("all-MiniLM-L6-v2", 384, cache_dir=Path(sys.argv[1]))
vecs = emb.encode(json.loads(sys.argv[2]))
heavy = sorted(m for m in ("torch", "sentence_transformers", "transformers") if m in sys.modules)
print(json.dumps({"source": emb.load().source, "heavy": heavy, "vecs": vecs.tolist()}))
"""


def test_cached_export_loads_without_torch_in_a_fresh_process(model_cache: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", FRESH_PROCESS, str(model_cache), json.dumps(TEXTS)],
        cwd=REPO,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["source"] == "cache"
    assert out["heavy"] == [], "loading the cached export imported torch"
    theirs = Embedder(MODEL, 384, backend="torch").encode(TEXTS)
    ours = np.array(out["vecs"], dtype=np.float32)
    assert float(np.min(np.sum(ours * theirs, axis=1))) > 0.9999


def _worker_pid(worker: EmbeddingProcess) -> int:
    (pid,) = list(worker._executor()._processes)  # the child to inspect
    return pid


async def test_embed_worker_never_imports_torch_when_the_cache_is_present(
    model_cache: Path,
) -> None:
    worker = EmbeddingProcess(MODEL, 384, cache_dir=model_cache)  # private: a cold start
    try:
        assert not worker.is_ready
        info = await worker.load()
        assert worker.is_ready
        assert (info.backend, info.source, info.torch_loaded) == ("onnx", "cache", False)
        maps = await asyncio.to_thread(Path(f"/proc/{_worker_pid(worker)}/maps").read_text)
        assert "onnxruntime" in maps
        assert "libtorch" not in maps, "the worker mapped torch's libraries"
        assert (await worker.encode(TEXTS)).shape == (3, 384)
    finally:
        worker.shutdown(wait=True)


async def test_vectors_are_identical_after_a_cold_restart(model_cache: Path) -> None:
    first = EmbeddingProcess(MODEL, 384, cache_dir=model_cache)
    try:
        before = await first.encode(TEXTS)
        query_before = await first.encode(["where do we live?"], is_query=True)
    finally:
        first.shutdown(wait=True)
    second = EmbeddingProcess(MODEL, 384, cache_dir=model_cache)
    try:
        after = await second.encode(TEXTS)
        query_after = await second.encode(["where do we live?"], is_query=True)
        assert (await second.load()).source == "cache"  # loaded, not exported again
    finally:
        second.shutdown(wait=True)
    assert np.array_equal(before, after)
    assert np.array_equal(query_before, query_after)


def test_cache_key_covers_model_files_dim_and_versions(tmp_path: Path) -> None:
    key = cache.cache_key(MODEL, 384)
    assert cache.entry_name(key) != cache.entry_name(cache.cache_key(MODEL, 256))
    assert key["model_files"] is not None  # the packaged model's files are fingerprinted
    assert set(key["versions"]) == set(cache.VERSIONED) and key["versions"]["onnxruntime"]
    bumped = {**key, "versions": {**key["versions"], "transformers": "0.0.1"}}
    assert cache.entry_name(bumped) != cache.entry_name(key)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    before = cache.fingerprint(model)
    (model / "config.json").write_text('{"hidden_size": 8}')
    assert cache.fingerprint(model) != before


def test_cache_publishes_atomically_and_ignores_foreign_or_partial_entries(
    tmp_path: Path,
) -> None:
    key = cache.cache_key(MODEL, 384)
    stale = tmp_path / ".tmp-crashed-export"
    stale.mkdir(parents=True)
    old = time.time() - 2 * cache.STALE_TMP_S
    os.utime(stale, (old, old))
    tmp = cache.new_tmp_dir(tmp_path, key)
    assert not stale.exists(), "a stale partial export was left behind"
    (tmp / "model.onnx").write_bytes(b"not really a model")
    assert cache.lookup(tmp_path, key) is None  # unpublished: invisible
    entry_path = cache.publish(tmp, tmp_path, key, cache.MANIFEST, {"pooling": "mean"})
    assert not tmp.exists() and entry_path.name == cache.entry_name(key)
    entry = cache.lookup(tmp_path, key)
    assert entry is not None and entry.manifest is not None
    assert entry.manifest["pooling"] == "mean"
    # A second publisher of the same key (a concurrent export) keeps the first entry.
    late = cache.new_tmp_dir(tmp_path, key)
    cache.publish(late, tmp_path, key, cache.MANIFEST, {"pooling": "cls"})
    assert not late.exists()
    assert cache.lookup(tmp_path, key).manifest["pooling"] == "mean"  # type: ignore[union-attr]
    # An entry whose recorded key differs is not ours.
    manifest = entry_path / cache.MANIFEST
    data = json.loads(manifest.read_text())
    data["key"]["dim"] = 999
    manifest.write_text(json.dumps(data))
    assert cache.lookup(tmp_path, key) is None


FACTS = [
    "I adopted a greyhound puppy last week, we named her Biscuit.",
    "My sister lives in Oslo and works as a nurse.",
    "The boat is called Aurora.",
]


@pytest.mark.slow  # 13 s on the shared 2-core box (2026-12-05)
async def test_switching_from_torch_to_the_cached_export_needs_no_reindex(tmp_path: Path) -> None:
    path = tmp_path / "data" / "luna.db"
    old = Memory(MemoryConfig(db_path=path, embedding_backend="torch", embedding_process=False))
    await old.open(background=False)
    try:
        await old.add_memories([{"text": t} for t in FACTS])
        torch_hits = [h.text for h in await old.recall("which pet did I adopt?", k=3)]
    finally:
        await old.close()
    new = Memory(MemoryConfig(db_path=path))  # the defaults: ONNX, in the embedding process
    await new.open(background=False)  # no "run luna memory reindex" refusal
    try:
        assert (await new.warmup()).backend == "onnx"  # type: ignore[union-attr]
        hits = [h.text for h in await new.recall("which pet did I adopt?", k=3)]
        assert hits == torch_hits and "Biscuit" in hits[0]
        stored = new.store.query(
            "SELECT m.text, v.embedding FROM memories m JOIN docs d ON d.kind = 'memory' "
            "AND d.ref_id = m.id JOIN docs_vec v ON v.rowid = d.id ORDER BY m.id"
        )
        torch_vecs = np.vstack([np.frombuffer(blob, dtype=np.float32) for _, blob in stored])
        onnx_vecs = await new.encoder.encode([text for text, _ in stored])
        assert float(np.min(np.sum(torch_vecs * onnx_vecs, axis=1))) > 0.9999
    finally:
        await new.close()
