"""Fixtures for memory tests: one real MiniLM model per test session, real SQLite files.

Invariants:
- The embedding model is loaded once (session scope) and shared by every ``Memory`` a test
  opens, because loading it takes seconds.
- Every database lives under the test's ``tmp_path``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from luna.config import MemoryConfig
from luna.memory import Memory
from luna.memory.embeddings import Embedder


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    emb = Embedder.shared("all-MiniLM-L6-v2", 384)
    emb.load()
    return emb


@pytest.fixture
def memory_config(tmp_path: Path) -> Callable[..., MemoryConfig]:
    def make(**overrides: object) -> MemoryConfig:
        return MemoryConfig(db_path=tmp_path / "data" / "luna.db", **overrides)  # type: ignore[arg-type]

    return make


@pytest.fixture
async def memory(
    memory_config: Callable[..., MemoryConfig], embedder: Embedder
) -> AsyncIterator[Memory]:
    mem = Memory(memory_config())
    mem.embedder = embedder
    await mem.open()
    try:
        yield mem
    finally:
        await mem.close()
