"""Fixtures for memory tests: one real MiniLM model per test session, real SQLite files.

Invariants:
- The embedding model is loaded once (session scope) and shared by every ``Memory`` a test
  opens, because loading it takes seconds; the ``memory`` fixture waits until it is ready, so
  its recall is hybrid from the first call.
- ``model_cache`` is one real export of the packaged model (the exporter child process, torch
  in it: tens of seconds), made once per session in a session folder, for the tests of the
  export and the cache.
- ``prepared_models`` is where the shared embedder finds its export: the machine's prepared
  cache (``.ci/install`` prepares it; every ``luna_config`` uses it) when it holds a checked
  export for today's cache key, else ``model_cache``.
- Every database lives under the test's ``tmp_path``; ``memory_config`` names
  ``prepared_models`` as its model cache, so no test's embedding worker exports the model.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from luna.config import MemoryConfig
from luna.memory import Memory
from luna.memory.embedding import model_cache as cache
from luna.memory.embedding.embeddings import Embedder
from tests.conftest import PREPARED_MODEL

MODEL = "all-MiniLM-L6-v2"


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A model cache folder holding the packaged model's checked ONNX export."""
    folder = tmp_path_factory.mktemp("models")
    outcome = cache.run_export(folder, MODEL, 384)
    assert outcome.ok, outcome.detail
    return folder


@pytest.fixture(scope="session")
def prepared_models(request: pytest.FixtureRequest) -> Path:
    """A model cache folder holding a checked ONNX export of the packaged model, exported here
    only when the machine's cache has none for today's key (see the module docstring)."""
    machine = Path(PREPARED_MODEL["model_cache"]) if PREPARED_MODEL else None
    if machine is not None:
        entry = cache.lookup(machine, cache.cache_key(MODEL, 384))
        if entry is not None and entry.is_export:
            return machine
    folder: Path = request.getfixturevalue("model_cache")
    return folder


@pytest.fixture(scope="session")
def embedder(prepared_models: Path) -> Embedder:
    emb = Embedder.shared(MODEL, 384, cache_dir=prepared_models)
    emb.load()
    return emb


@pytest.fixture
def memory_config(tmp_path: Path, prepared_models: Path) -> Callable[..., MemoryConfig]:
    """Factory of a MemoryConfig in ``tmp_path`` whose embedding worker finds the prepared
    export (a data folder's own cache is empty: the worker would export the model first)."""

    def make(**overrides: object) -> MemoryConfig:
        values = {"db_path": tmp_path / "data" / "luna.db", "model_cache": prepared_models}
        return MemoryConfig(**{**values, **overrides})  # type: ignore[arg-type]

    return make


@pytest.fixture
async def memory(
    memory_config: Callable[..., MemoryConfig], embedder: Embedder
) -> AsyncIterator[Memory]:
    mem = Memory(memory_config())
    mem.embedder = embedder
    await mem.open()
    await mem.warmup()
    try:
        yield mem
    finally:
        await mem.close()
