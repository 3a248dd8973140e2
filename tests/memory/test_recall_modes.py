"""While the embedding model warms, recall is keyword-only and never waits; the turn's messages
are embedded once it is ready; the log and ``luna doctor`` say which mode served each recall."""

from __future__ import annotations

import asyncio
import functools
import json
import os
from collections.abc import Callable
from pathlib import Path

from luna import observe
from luna.config import Config
from luna.doctor.checks import _recall_modes
from luna.memory import Memory
from luna.memory.embedding.embed_worker import EmbeddingProcess

MODEL = "all-MiniLM-L6-v2"


def recall_events(log_dir: Path) -> list[dict]:
    return [
        e
        for f in sorted(log_dir.glob("luna-*.jsonl"))
        for e in map(json.loads, f.read_text().splitlines())
        if e.get("event") == "memory_op" and e.get("op") in ("recall", "embedder_ready")
    ]


async def until_embedded(mem: Memory) -> None:
    """Wait for the background indexer to catch up (a wait, not a timing assertion)."""
    for _ in range(1200):
        counts = await asyncio.to_thread(mem.store.counts)
        if counts["indexed"] and counts["embedded"] == counts["indexed"]:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the indexer did not embed the backlog: {counts}")


async def test_recall_is_keyword_only_while_the_model_warms_then_hybrid(
    luna_config: Callable[..., Config], model_cache: Path, tmp_path: Path
) -> None:
    cfg = luna_config()
    observe.setup(cfg.observe.log_dir, console=False)
    # A private worker held busy behind a gate: its model cannot be ready until we open it.
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    worker = EmbeddingProcess(MODEL, 384, cache_dir=model_cache)
    held = worker._executor().submit(functools.partial(Path.read_text, gate))
    mem = Memory(cfg.memory)
    mem.encoder.process = worker
    try:
        await mem.open()  # starts warming in the background and returns
        assert mem.recall_mode == "fts_warming" and mem.encoder.state == "warming"
        await mem.append_message(
            "monday",
            {"role": "user", "content": "I adopted a greyhound puppy, we named her Biscuit."},
        )
        await mem.append_message("monday", {"role": "assistant", "content": "Lovely name!"})
        keyword = await mem.recall("Biscuit the greyhound", session_id="friday")
        assert keyword and "Biscuit" in keyword[0].text  # keywords still work, at once
        assert await mem.recall("what is my dog called?", session_id="friday") == []
        counts = await asyncio.to_thread(mem.store.counts)
        assert counts["embedded"] == 0 and counts["indexed"] == 2

        await asyncio.to_thread(gate.write_text, "open")
        await asyncio.wrap_future(held)
        assert await mem.encoder.wait_ready() and mem.recall_mode == "hybrid"
        await until_embedded(mem)  # the messages said while it warmed are embedded now
        semantic = await mem.recall("what is my dog called?", session_id="friday")
        assert semantic and "Biscuit" in semantic[0].text
    finally:
        await mem.close()
        worker.shutdown(wait=True)
        observe.shutdown()

    events = recall_events(cfg.observe.log_dir)
    modes = [e.get("mode") for e in events if e["op"] == "recall"]
    assert modes == ["fts_warming", "fts_warming", "hybrid"]
    ready = [i for i, e in enumerate(events) if e["op"] == "embedder_ready"]
    assert ready and events[ready[0]]["source"] == "cache"
    assert events[ready[0]]["torch_loaded"] is False
    # Doctor reads the same log and says which mode served the last turn and the others.
    result = _recall_modes(cfg)
    assert result.ok is True, result
    assert "last turn: hybrid" in result.detail
    assert "2 keyword-only while the embedding model warmed up" in result.detail


async def test_doctor_flags_recall_without_vectors(luna_config: Callable[..., Config]) -> None:
    cfg = luna_config()
    observe.setup(cfg.observe.log_dir, console=False)
    mem = Memory(cfg.memory)
    try:
        await mem.open(use_vectors=False)
        await mem.append_message("s", {"role": "user", "content": "the key is under the mat"})
        assert await mem.recall("key", session_id="t")
    finally:
        await mem.close()
        observe.shutdown()
    result = _recall_modes(cfg)
    assert result.ok is False and "keyword-only (vectors off)" in result.detail
    assert not result.essential and result.fix
