"""Images for tests: PNGs made from noise, and an image source that holds them in memory.

``png`` needs no imaging library: a valid 8-bit RGB PNG of seeded noise (so each seed is a
different picture to llama-server, which knows images by their pixels). ``HeldImages`` is the
agent's image source (``luna.agent.images.ImageSource``) over a dict by content hash.
"""

from __future__ import annotations

import hashlib
import random
import struct
import zlib
from typing import Any

from luna.llm.vision import image_part
from luna.messages import Attachment, ToolMedia


def png(width: int, height: int, seed: int = 0) -> bytes:
    rnd = random.Random(seed)
    row = width * 3
    raw = b"".join(b"\x00" + rnd.randbytes(row) for _ in range(height))

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )


class HeldImages:
    """An image source over bytes held in memory (images taken as they are)."""

    def __init__(self) -> None:
        self.data: dict[str, tuple[str, bytes]] = {}
        self.reads = 0

    def add(self, data: bytes, name: str = "photo.png", mime: str = "image/png") -> Attachment:
        sha = hashlib.sha256(data).hexdigest()
        self.data[sha] = (mime, data)
        return Attachment("image", mime, name, len(data), sha)

    async def image_part(self, attachment: Attachment) -> dict[str, Any] | None:
        self.reads += 1
        held = self.data.get(attachment.sha256)
        return image_part(*held) if held else None

    async def keep(self, media: ToolMedia, name: str) -> Attachment | None:
        if not media.data.startswith(b"\x89PNG"):
            return None
        return self.add(media.data, name, media.mime)
