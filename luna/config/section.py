"""The base of every configuration model: frozen, strict about unknown keys, finite numbers.

Invariant: a ``Path`` field refuses an empty or blank string (it would mean the current folder).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, field_validator


def _clean_path(value: object) -> object:
    if isinstance(value, str) and not value.strip():
        raise ValueError("must not be empty")
    return value


class Section(BaseModel):
    """Frozen, strict about unknown keys, no infinities or NaNs."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_empty_paths(cls, value: object, info: object) -> object:
        field = cls.model_fields.get(getattr(info, "field_name", ""))
        if field is not None and field.annotation is Path:
            return _clean_path(value)
        return value
