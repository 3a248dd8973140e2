"""Images for a model: guarded opening, downscaling, deterministic bytes, no metadata."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest
from PIL import Image

from luna.attachments.images import (
    MAX_PIXELS,
    DamagedImageError,
    ImageBombError,
    ImageCache,
    NotAnImageError,
    normalize,
)
from luna.attachments.store import AttachmentStore
from luna.errors import AttachmentMissingError
from tests.fakes.attachments import SVG, animated_gif, photo, photo_with_exif, png_bomb, truncated


def _open(data: bytes) -> Image.Image:
    return Image.open(io.BytesIO(data))


def test_normalize_downscales_to_the_longest_side_and_keeps_the_aspect() -> None:
    out = normalize(photo(2000, 1500), 1024)
    assert (out.width, out.height) == (1024, 768)
    assert out.mime == "image/jpeg" and _open(out.data).format == "JPEG"
    small = normalize(photo(300, 200, fmt="PNG"), 1024)
    assert (small.width, small.height) == (300, 200)  # never enlarged
    assert small.mime == "image/png" and _open(small.data).mode == "RGB"


def test_normalize_gives_the_same_bytes_for_the_same_input() -> None:
    for source in (photo(1600, 1200), photo(900, 700, fmt="PNG"), photo_with_exif()):
        first = normalize(source, 512)
        assert normalize(bytes(source), 512).data == first.data
        assert normalize(source, 256).data != first.data  # the side is part of the key


def test_normalize_strips_exif_and_gps_after_turning_the_photo_upright() -> None:
    source = photo_with_exif(640, 480, orientation=6)
    assert b"PhoneMaker" in source and _open(source).getexif()
    out = normalize(source, 1024)
    assert (out.width, out.height) == (480, 640)  # turned, as the phone showed it
    assert b"PhoneMaker" not in out.data and b"Exif" not in out.data
    decoded = _open(out.data)
    assert not decoded.getexif() and "icc_profile" not in decoded.info


def test_normalize_keeps_the_first_frame_of_an_animated_gif() -> None:
    out = normalize(animated_gif(frames=3), 1024)
    assert out.frames > 1 and out.mime == "image/png"
    assert _open(out.data).convert("RGB").getpixel((10, 10)) == (255, 0, 0)


def test_normalize_flattens_transparency_onto_white() -> None:
    clear = Image.new("RGBA", (40, 40), (0, 0, 0, 0))
    buf = io.BytesIO()
    clear.save(buf, "PNG")
    out = _open(normalize(buf.getvalue(), 1024).data)
    assert out.mode == "RGB" and out.getpixel((5, 5)) == (255, 255, 255)


def test_normalize_refuses_a_decompression_bomb_from_its_header() -> None:
    bomb = png_bomb(12_000)
    assert len(bomb) < 100_000 and 12_000**2 > MAX_PIXELS
    started = time.monotonic()
    with pytest.raises(ImageBombError, match="pixel limit"):
        normalize(bomb, 1024)
    assert time.monotonic() - started < 1.0  # refused before a pixel is decoded
    with pytest.raises(ImageBombError):
        normalize(png_bomb(20_000), 1024)  # past twice the limit: Pillow's own error


@pytest.mark.parametrize(
    ("data", "error"),
    [
        (b"this is a text file named photo.png", NotAnImageError),
        (SVG, NotAnImageError),
        (b"%PDF-1.7\n", NotAnImageError),
        (truncated(photo(800, 600, fmt="PNG"), 0.3), DamagedImageError),
        (truncated(photo(800, 600), 0.05), DamagedImageError),
    ],
    ids=["text", "svg", "pdf", "truncated-png", "truncated-jpeg"],
)
def test_normalize_refuses_what_is_no_whole_image(data: bytes, error: type[Exception]) -> None:
    with pytest.raises(error):
        normalize(data, 1024)


async def test_image_cache_derives_once_and_keeps_the_bytes(tmp_path: Path) -> None:
    store = AttachmentStore(tmp_path / "attachments")
    source = photo(1500, 1000)
    sha = store.write(source)
    cache = ImageCache(store, 1024)
    first = await cache.derived(sha)
    kept = tmp_path / "attachments" / "derived" / "1024" / sha[:2] / f"{sha}.jpg"
    assert kept.read_bytes() == first.data
    assert await ImageCache(store, 1024).derived(sha) == first and not cache._busy
    # What is on disk is what is given, even if an upgraded encoder would now write other bytes.
    older = normalize(photo(1500, 1000), 1000).data
    kept.write_bytes(older)
    assert (await ImageCache(store, 1024).derived(sha)).data == older
    other = await ImageCache(store, 512).derived(sha)
    assert (other.width, other.height) == (512, 341)
    store.remove([sha])
    assert not kept.exists()
    with pytest.raises(AttachmentMissingError):
        await cache.derived(sha)


async def test_image_cache_makes_a_damaged_derived_copy_again(tmp_path: Path) -> None:
    store = AttachmentStore(tmp_path / "attachments")
    sha = store.write(photo(300, 200, fmt="PNG"))
    cache = ImageCache(store, 1024)
    first = await cache.derived(sha)
    kept = cache.folder(sha) / f"{sha}.png"
    kept.write_bytes(b"garbage")
    assert await cache.derived(sha) == first and kept.read_bytes() == first.data
