"""Images on the wire: ``image_url`` content parts, and what a text-only server gets instead.

llama-server takes an image as an OpenAI ``image_url`` content part whose URL is a base64
``data:`` URL, in a user message or a tool message (it swaps each part for its media marker
before the chat template runs, so any template renders it). It identifies an image by a hash
of its pixels: the same bytes in a later request reuse the KV cache the first one filled.

Invariants:
- ``image_part`` of the same bytes is the same dict, byte for byte, every time.
- A server without vision never receives an image part: ``without_images`` puts one text line
  in each part's place (llama-server answers an image without ``--mmproj`` with HTTP 500).
- Pure functions, no I/O.
"""

from __future__ import annotations

import base64
from typing import Any

IMAGE_WITHHELD = "[an image was here; this model cannot see images]"
# What one image counts as when a request is sized, in characters: about 1,000 tokens at three
# characters a token, what Qwen3.5 pays for an image at the default longest side (README).
IMAGE_CHARS = 3000
VISION_HINT = (
    "start llama-server with the model's vision projector, --mmproj FILE (for Qwen3.5 the "
    "mmproj-*.gguf next to the model), and `luna doctor` shows vision: yes"
)


def data_url(mime: str, data: bytes) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def image_part(mime: str, data: bytes) -> dict[str, Any]:
    """One ``image_url`` content part carrying ``data`` inline."""
    return {"type": "image_url", "image_url": {"url": data_url(mime, data)}}


def text_part(text: str) -> dict[str, Any]:
    return {"type": "text", "text": text}


def is_image_part(part: Any) -> bool:
    return isinstance(part, dict) and part.get("type") == "image_url"


def count_images(messages: list[dict[str, Any]]) -> int:
    return sum(
        1
        for m in messages
        if isinstance(m.get("content"), list)
        for part in m["content"]
        if is_image_part(part)
    )


def for_sizing(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each image's data replaced by ``IMAGE_CHARS`` characters: what a
    request is sized by (an image costs its tokens, not the length of its base64)."""
    if not count_images(messages):
        return messages
    stand_in = {"type": "image_url", "image_url": {"url": "x" * IMAGE_CHARS}}
    return [
        {**m, "content": [stand_in if is_image_part(p) else p for p in m["content"]]}
        if isinstance(m.get("content"), list)
        else m
        for m in messages
    ]


def without_images(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with each image part replaced by the ``IMAGE_WITHHELD`` text part."""
    out = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, list) and any(is_image_part(p) for p in content):
            parts = [text_part(IMAGE_WITHHELD) if is_image_part(p) else p for p in content]
            m = {**m, "content": parts}
        out.append(m)
    return out


def text_of(content: Any) -> str:
    """The text of a message's content, string or parts (image parts left out)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(p.get("text", "")) for p in content if isinstance(p, dict) and "text" in p
        )
    return "" if content is None else str(content)
