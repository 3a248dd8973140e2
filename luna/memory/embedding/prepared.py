"""Where the prepared embedding model lives, whether it is ready, and preparing it by hand.

The prepared model is the ONNX export of ``memory.embedding_model``
(:mod:`luna.memory.embedding.model_cache`). It lives in the machine's model cache
(``memory.model_cache``, by default ``~/.cache/luna/embedding-models``), shared by every data
folder, so a new data folder never exports: ``.ci/install`` prepares it (``luna memory
prepare``: :func:`prepare_now`), and a Luna that finds it missing prepares it in a detached
process (:mod:`luna.memory.embedding.export_job`) that finishes even when that Luna exits first.
A copy an older Luna made in the data folder (``<data>/models``) is still used.

Invariants:
- :func:`places` is the one rule for where to look (the machine cache, then the data folder's
  copy) and where to publish (the machine cache; the data folder when none is configured).
- :func:`find_state` only looks: it never exports, loads a model or imports torch (a few stats
  and package versions: milliseconds). Blocking: call from a thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from luna.config import MemoryConfig
from luna.memory.embedding.export_job import is_under_way
from luna.memory.embedding.model_cache import cache_dir_for, cache_key, lookup


@dataclass(frozen=True)
class ModelPlaces:
    """``export_dir``: looked in first, and where an export is published; ``legacy_dir``: the
    data folder's own cache, looked in second (None when it is ``export_dir``)."""

    export_dir: Path
    legacy_dir: Path | None


def places(cfg: MemoryConfig) -> ModelPlaces:
    data = cache_dir_for(cfg.db_path)
    shared = cfg.model_cache
    if shared is None or shared == data:
        return ModelPlaces(data, None)
    return ModelPlaces(shared, data)


@dataclass(frozen=True)
class PreparedState:
    """What :func:`find_state` found: ``path`` is the entry's folder when there is one."""

    places: ModelPlaces
    path: Path | None = None
    unsupported: str = ""  # why the model cannot be exported (it then runs on torch)
    is_under_way: bool = False  # an export holds the lock now

    @property
    def is_ready(self) -> bool:
        return self.path is not None

    @property
    def is_shared(self) -> bool:
        return self.path is not None and self.path.parent == self.places.export_dir


def find_state(cfg: MemoryConfig) -> PreparedState:
    """Where the configured model's prepared export is, if anywhere (see the invariants)."""
    where = places(cfg)
    key = cache_key(cfg.embedding_model, cfg.embedding_dim)
    for folder in (where.export_dir, where.legacy_dir):
        entry = lookup(folder, key) if folder is not None else None
        if entry is not None:
            return PreparedState(where, entry.path, "" if entry.is_export else entry.reason)
    busy = is_under_way(where.export_dir, cfg.embedding_model, cfg.embedding_dim)
    return PreparedState(where, is_under_way=busy)


def uses_local_model(cfg: MemoryConfig) -> bool:
    """True when embeddings come from a prepared ONNX export (not an endpoint, not torch)."""
    return not cfg.embedding_endpoint and cfg.embedding_backend == "onnx"


def not_ready_line(state: PreparedState) -> str:
    """The one line a start says when the model is not prepared yet."""
    return (
        "memory: the embedding model is being prepared in the background (once per machine, "
        f"about a minute, in {state.places.export_dir}); until it is ready, recall is "
        "keyword-only"
    )


def prepare_now(cfg: MemoryConfig) -> int:
    """``luna memory prepare``: prepare the configured model now, waiting for it (about a
    minute; steps on a terminal). Exit code 0 when it is ready (or nothing is to prepare)."""
    from luna.memory.embedding.model_cache import run_export

    if not uses_local_model(cfg):
        print("embedding model: nothing to prepare (an endpoint or the torch backend is set)")
        return 0
    state = find_state(cfg)
    if state.is_ready:
        print(f"embedding model: ready in {state.path}")
        return 0
    where = state.places.export_dir
    print(f"embedding model: preparing {cfg.embedding_model} in {where} (about a minute)…")
    outcome = run_export(where, cfg.embedding_model, cfg.embedding_dim)
    print(f"embedding model: {outcome.detail}")
    return 0 if find_state(cfg).is_ready else 1
