"""The cached ONNX export gives torch's vectors; a model that cannot be exported stays on torch."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from luna.memory.embedding.embeddings import Embedder
from luna.memory.embedding.model_cache import UNSUPPORTED
from luna.memory.embedding.models import resolve_model

TEXTS = [
    "we moved to Lisbon in March",
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "x",
    "",
    "  padded with spaces, MIXED case and ünïcödé 🚲  ",
    "a much longer message " * 60,  # past max_seq_length: truncated the same way
]


def test_onnx_backend_matches_torch_vectors(model_cache: Path) -> None:
    onnx = Embedder("all-MiniLM-L6-v2", 384, backend="onnx", cache_dir=model_cache)
    torch_ = Embedder("all-MiniLM-L6-v2", 384, backend="torch")
    a, b = onnx.encode(TEXTS), torch_.encode(TEXTS)
    assert onnx.load().backend == "onnx" and onnx.load().source == "cache"
    assert torch_.load().backend == "torch"
    assert a.shape == b.shape == (len(TEXTS), 384)
    assert float(np.min(np.sum(a * b, axis=1))) > 0.9999
    # One text at a time (other batches, other padding): the same vectors.
    single = np.vstack([onnx.encode([t]) for t in TEXTS])
    assert float(np.min(np.sum(single * a, axis=1))) > 0.99999
    assert onnx.encode([]).shape == (0, 384)


@pytest.mark.slow  # 16 s on the shared 2-core box (2026-12-05)
def test_unexportable_model_is_recorded_and_stays_on_torch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from sentence_transformers import SentenceTransformer, models

    transformer = models.Transformer(resolve_model("all-MiniLM-L6-v2"))
    pooling = models.Pooling(384, pooling_mode="max")
    folder = tmp_path / "max-pooled"
    SentenceTransformer(modules=[transformer, pooling], device="cpu").save(str(folder))
    cache = tmp_path / "models"
    with caplog.at_level(logging.WARNING):
        emb = Embedder(str(folder), 384, cache_dir=cache)
        info = emb.load()
    assert info.backend == "torch" and info.source == "torch"
    assert "pooling 'max' is not exported" in info.detail
    assert "embeddings run on torch" in caplog.text
    (entry,) = [p for p in cache.iterdir() if not p.name.startswith(".")]
    assert (entry / UNSUPPORTED).exists() and not (entry / "model.onnx").exists()
    # The next start reads the record instead of trying the export again.
    again = Embedder(str(folder), 384, cache_dir=cache)
    assert "recorded in" in again.load().detail
    vecs = again.encode(["still works"])
    assert vecs.shape == (1, 384)
