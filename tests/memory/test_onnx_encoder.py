"""The ONNX Runtime embedding path gives torch's vectors; unsupported layouts stay on torch."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from luna.memory.embeddings import Embedder, resolve_model
from luna.memory.onnx_encoder import build_onnx_encoder

TEXTS = [
    "we moved to Lisbon in March",
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "x",
    "a much longer message " * 60,  # past max_seq_length: truncated the same way
]


def test_onnx_backend_matches_torch_vectors() -> None:
    onnx = Embedder("all-MiniLM-L6-v2", 384, backend="onnx")
    torch_ = Embedder("all-MiniLM-L6-v2", 384, backend="torch")
    a, b = onnx.encode(TEXTS), torch_.encode(TEXTS)
    assert onnx._onnx is not None and torch_._onnx is None  # noqa: SLF001 - which path ran
    assert a.shape == b.shape == (len(TEXTS), 384)
    assert float(np.min(np.sum(a * b, axis=1))) > 0.9999
    assert onnx.encode([]).shape[0] == 0


def test_onnx_encoder_refuses_unsupported_pooling(caplog: pytest.LogCaptureFixture) -> None:
    from sentence_transformers import SentenceTransformer, models

    transformer = models.Transformer(resolve_model("all-MiniLM-L6-v2"))
    pooling = models.Pooling(384, pooling_mode="max")
    model = SentenceTransformer(modules=[transformer, pooling], device="cpu")
    with caplog.at_level(logging.WARNING):
        assert build_onnx_encoder(model) is None
    assert "stay on torch" in caplog.text
