"""What an LLM server says about itself: llama-server's ``/props``, read once per client.

Invariant: ``has_vision`` is True only when the server itself reports
``modalities.vision: true`` (it was started with ``--mmproj``); any other server, or a
llama-server that says nothing, is taken as text-only, since llama-server answers an image
part without a projector with HTTP 500.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ServerInfo:
    """What llama-server says about itself in ``/props`` (None for other servers)."""

    n_ctx: int | None
    total_slots: int | None
    supports_preserve_reasoning: bool
    build: str
    has_vision: bool = False

    @classmethod
    def from_props(cls, props: dict[str, Any]) -> ServerInfo:
        settings = props.get("default_generation_settings") or {}
        caps = props.get("chat_template_caps") or {}
        modalities = props.get("modalities") or {}
        n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
        slots = props.get("total_slots")
        return cls(
            n_ctx=n_ctx if isinstance(n_ctx, int) else None,
            total_slots=slots if isinstance(slots, int) else None,
            supports_preserve_reasoning=bool(
                isinstance(caps, dict) and caps.get("supports_preserve_reasoning")
            ),
            build=str(props.get("build_info") or ""),
            has_vision=isinstance(modalities, dict) and modalities.get("vision") is True,
        )
