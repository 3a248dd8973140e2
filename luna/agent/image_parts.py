"""The agent's image source over the attachment store: image parts by content hash, cached.

Every request of a session with an image repeats that image's part, so the part is built once
(read, normalized, base64-encoded, off the event loop) and kept in a bounded in-memory cache
by content hash; the attachment store is read again only after it was evicted.

Invariants:
- The same attachment gives the same part dict every time (the bytes the store's ``load``
  gives for it are the normalized, deterministically re-encoded image), so every later
  request repeats it byte for byte and llama-server's cache holds.
- The cache holds at most ``max_bytes`` of data URLs, least recently used out first.
- Blocking work (``load``, ``save``: file I/O, decoding, re-encoding) runs in a worker thread.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from luna.llm.vision import image_part
from luna.messages import Attachment, ToolMedia

# (attachment) -> (mime, bytes to send) of the stored, normalized image, or None when gone
Load = Callable[[Attachment], "tuple[str, bytes] | None"]
# (bytes, declared mime, name) -> the stored image's Attachment, or None when not an image
Save = Callable[[bytes, str, str], "Attachment | None"]
DEFAULT_CACHE_BYTES = 64 * 1024 * 1024


class StoredImages:
    """``luna.agent.images.ImageSource`` over the attachment store's ``load`` and ``save``."""

    def __init__(self, load: Load, save: Save, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self._load = load
        self._save = save
        self.max_bytes = max_bytes
        self._parts: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self._held = 0

    async def image_part(self, attachment: Attachment) -> dict[str, Any] | None:
        sha = attachment.sha256
        if sha in self._parts:
            self._parts.move_to_end(sha)
            return self._parts[sha]
        part = await asyncio.to_thread(self._build, attachment)
        if part is not None:
            self._remember(sha, part)
        return part

    async def keep(self, media: ToolMedia, name: str) -> Attachment | None:
        return await asyncio.to_thread(self._save, media.data, media.mime, name)

    def _build(self, attachment: Attachment) -> dict[str, Any] | None:
        loaded = self._load(attachment)
        return image_part(*loaded) if loaded is not None else None

    def _remember(self, sha: str, part: dict[str, Any]) -> None:
        size = len(part["image_url"]["url"])
        if size > self.max_bytes:
            return
        self._parts[sha] = part
        self._sizes[sha] = size
        self._held += size
        while self._held > self.max_bytes:
            old, _ = self._parts.popitem(last=False)
            self._held -= self._sizes.pop(old)
