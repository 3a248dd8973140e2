"""StoredImages: parts by content hash, the same dict every time, read once while cached."""

from __future__ import annotations

import hashlib

from luna.agent.image_parts import StoredImages
from luna.messages import Attachment, ToolMedia
from tests.fakes.images import png


class Shelf:
    """An attachment store over a dict (the intake's own lives in luna/attachments)."""

    def __init__(self) -> None:
        self.blobs: dict[str, bytes] = {}
        self.loads = 0

    def load(self, attachment: Attachment) -> tuple[str, bytes] | None:
        self.loads += 1
        data = self.blobs.get(attachment.sha256)
        return (attachment.mime, data) if data is not None else None

    def save(self, data: bytes, mime: str, name: str) -> Attachment | None:
        if not data.startswith(b"\x89PNG"):
            return None
        sha = hashlib.sha256(data).hexdigest()
        self.blobs[sha] = data
        return Attachment("image", mime, name, len(data), sha)


async def test_image_parts_are_built_once_and_repeat_byte_for_byte() -> None:
    shelf = Shelf()
    images = StoredImages(shelf.load, shelf.save)
    photo = await images.keep(ToolMedia("image", "image/png", png(32, 32)), "chart-1.png")
    assert photo is not None and photo.name == "chart-1.png"
    first = await images.image_part(photo)
    assert first is not None and first["image_url"]["url"].startswith("data:image/png;base64,")
    assert await images.image_part(photo) is first and shelf.loads == 1
    assert await images.keep(ToolMedia("image", "image/png", b"<svg/>"), "x.png") is None
    gone = Attachment("image", "image/png", "gone.png", 1, "0" * 64)
    assert await images.image_part(gone) is None


async def test_image_parts_cache_is_bounded_least_recent_out() -> None:
    shelf = Shelf()
    one = await StoredImages(shelf.load, shelf.save).keep(
        ToolMedia("image", "image/png", png(64, 64, 1)), "one.png"
    )
    two = await StoredImages(shelf.load, shelf.save).keep(
        ToolMedia("image", "image/png", png(64, 64, 2)), "two.png"
    )
    assert one is not None and two is not None
    part = await StoredImages(shelf.load, shelf.save).image_part(one)
    assert part is not None
    images = StoredImages(shelf.load, shelf.save, max_bytes=len(part["image_url"]["url"]) + 10)
    await images.image_part(one)
    await images.image_part(two)  # evicts one
    loads = shelf.loads
    await images.image_part(two)
    assert shelf.loads == loads  # still held
    await images.image_part(one)
    assert shelf.loads == loads + 1  # read again
