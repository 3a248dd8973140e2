"""Which model the stored vectors are, kept with the database: ``meta``, the vector table and
the reindex that changes them. A mixin of :class:`luna.memory.storage.store.Store` (its own
module: the store's one file had grown past the size a module should have).

Invariants:
- ``meta`` holds ``embedding_model`` and ``embedding_dim``; a configured model that differs is
  refused with a message naming ``luna memory reindex``.
- Every vector carries its model (``docs.embed_model``); the store writes only vectors of
  meta's model and refuses others (:class:`VectorModelChangedError`), so a search never mixes
  two models.
- A reindex drops every vector and records the new model and ``reindex_model`` in one
  transaction; while ``reindex_model`` names the configured model it is resumed, never
  restarted (:meth:`VectorModel.reindex_pending`).
- Blocking, like the store: callers run it in worker threads.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from luna.errors import MemoryStoreError


class VectorModelChangedError(MemoryStoreError):
    """The database's vectors are now another model's (a reindex ran beside this process)."""


class VectorModel:
    """Meta, the vector table and the model of the vectors (mixed into Store)."""

    path: Path
    lock: threading.RLock
    vector_enabled: bool
    dim: int | None
    model: str | None  # the model this process's vectors come from
    _db_model: str | None  # meta's embedding_model as last read
    _ram_index: dict[str, Any]
    transaction: Callable[..., contextlib.AbstractContextManager[Any]]
    translated: Callable[[], contextlib.AbstractContextManager[None]]
    query: Callable[..., list[tuple]]
    _see_other_writers: Callable[[], None]

    def vectors_current(self) -> bool:
        """False once the database's vectors are another model's than this process embeds
        with (a ``luna memory reindex`` beside it): its query vectors must not be searched."""
        with self.lock, self.translated():
            self._see_other_writers()
            return self.model is None or self._db_model in (None, self.model)

    def get_meta(self, key: str) -> str | None:
        rows = self.query("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        with self.transaction() as conn:
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def check_embedding_model(self, model: str, dim: int) -> None:
        """Record the model on first use; refuse a different one (MemoryStoreError)."""
        stored_model, stored_dim = self.get_meta("embedding_model"), self.get_meta("embedding_dim")
        if stored_model is None:
            self.set_meta("embedding_model", model)
            self.set_meta("embedding_dim", str(dim))
        elif stored_model != model or stored_dim != str(dim):
            raise MemoryStoreError(
                f"the memory database {self.path} was indexed with embedding model "
                f"{stored_model!r} ({stored_dim} dims) but the configuration says {model!r} "
                f"({dim} dims); run `luna memory reindex` to re-embed everything with the "
                "configured model"
            )
        self.dim = dim
        self.model = model
        if self.vector_enabled:
            self._ensure_vec_table(dim)

    def _ensure_vec_table(self, dim: int) -> None:
        with self.transaction() as conn:
            conn.execute(
                "CREATE VIRTUAL TABLE IF NOT EXISTS docs_vec USING vec0("
                f"embedding float[{int(dim)}] distance_metric=cosine, "
                "scope text partition key)"
            )

    def reindex_pending(self, model: str, dim: int) -> bool:
        """True when a reindex to (``model``, ``dim``) began and has not finished."""
        return self.get_meta("reindex_model") == f"{model}\t{dim}"

    def finish_reindex(self) -> None:
        with self.transaction() as conn:
            conn.execute("DELETE FROM meta WHERE key = 'reindex_model'")

    def reset_vectors(self, model: str, dim: int) -> None:
        """Drop every vector and record a new model (first step of a reindex; the reindex is
        recorded as under way until :meth:`finish_reindex`)."""
        with self.transaction() as conn:
            conn.execute("DROP TABLE IF EXISTS docs_vec")
            conn.execute("DELETE FROM doc_raw_vec")
            self._ram_index.clear()
            conn.execute("UPDATE docs SET embedded = 0, embed_model = NULL")
            for key, value in (
                ("embedding_model", model),
                ("embedding_dim", str(dim)),
                ("reindex_model", f"{model}\t{dim}"),
            ):
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (?, ?) "
                    "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                    (key, value),
                )
        self.dim = dim
        self.model = model
        if self.vector_enabled:
            self._ensure_vec_table(dim)
