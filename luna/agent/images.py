"""Images in the conversation: what the model gets for a message's image attachments.

A model that can see gets each image as an ``image_url`` part (the normalized bytes the image
source gives, as a ``data:`` URL) before the message's text; a user's images in their message,
a tool's images in its result (llama-server takes image parts in a tool message and renders
them inside its ``<tool_response>``). A text-only model gets one line per image instead.

Invariants:
- The same attachment is rendered the same way, byte for byte, in every request of a session
  while the server's vision stays the same: the parts come from the image source by content
  hash, the lines only from the attachment's own fields (never from a description that may
  arrive later), so llama-server's KV cache (which knows an image by its pixels) stays valid.
- Attachments that are not images are left to the attachments intake (documents become text
  in the message itself); they add nothing here.
- Pure functions (``luna.agent.sight`` fetches the parts for a turn).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from luna.attachments.sizes import size_text
from luna.llm.vision import text_part
from luna.messages import Attachment, ToolMedia

ImageParts = Mapping[str, dict[str, Any]]  # sha256 -> image_url part
NO_PARTS: ImageParts = {}


class ImageSource(Protocol):
    """Where image bytes come from and go to (the attachment store, images normalized)."""

    async def image_part(self, attachment: Attachment) -> dict[str, Any] | None:
        """The ``image_url`` part of a stored image (normalized, re-encoded bytes; the same
        dict every time), or None when it cannot be read."""
        ...

    async def keep(self, media: ToolMedia, name: str) -> Attachment | None:
        """Store an image a tool returned, as ``name``; None when its bytes are no image."""
        ...


def unseen_line(attachment: Attachment) -> str:
    """What a model that cannot see this image reads in its place."""
    name = attachment.name or attachment.sha256[:12]
    return (
        f"[image {name} ({attachment.mime}, {size_text(attachment.size)}): "
        "not shown, this model cannot see images]"
    )


def unreadable_line(attachment: Attachment) -> str:
    """What a model that can see reads for an image whose stored file cannot be read."""
    name = attachment.name or attachment.sha256[:12]
    return f"[image {name} ({attachment.mime}, {size_text(attachment.size)}): its file is gone]"


def images_of(attachments: Iterable[Attachment]) -> list[Attachment]:
    return [a for a in attachments if a.kind == "image"]


def with_attachments(
    message: dict[str, Any], attachments: Iterable[Attachment], parts: ImageParts
) -> dict[str, Any]:
    """``message`` (string content) with its images: parts first when ``parts`` has them,
    else one ``unseen_line`` each after the text."""
    images = images_of(attachments)
    if not images:
        return message
    text = str(message.get("content") or "")
    shown = [parts[a.sha256] for a in images if a.sha256 in parts]
    lines = [unseen_line(a) for a in images if a.sha256 not in parts]
    if lines:
        text = "\n".join([text, *lines]) if text else "\n".join(lines)
    if not shown:
        return {**message, "content": text}
    return {**message, "content": [*shown, text_part(text)]}
