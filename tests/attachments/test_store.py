"""The attachment store with real files: sniffing, atomic storage, normalized images."""

from __future__ import annotations

import hashlib
import io
import struct
import zlib
from pathlib import Path

import pytest
from PIL import Image

from luna.attachments import AttachmentRefusedError, AttachmentStore, sniff_mime
from luna.attachments.images import normalize
from tests.fakes.images import png


def photo_with_exif(width: int = 1600, height: int = 1200) -> bytes:
    image = Image.new("RGB", (width, height))
    for x in range(0, width, 40):
        image.paste((x % 256, (x * 3) % 256, 90), (x, 0, x + 20, height))
    exif = Image.Exif()
    exif[0x010F] = "SecretCamera"  # Make
    exif[0x8825] = {2: (52.0, 30.0, 0.0)}  # GPS
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=95, exif=exif)
    return out.getvalue()


def test_store_normalizes_deterministically_and_strips_exif(tmp_path: Path) -> None:
    data = photo_with_exif()
    assert b"SecretCamera" in data
    store = AttachmentStore(tmp_path / "attachments", max_side=1024)
    attachment = store.put(data, "IMG_1.jpg")
    assert attachment.mime == "image/jpeg" and attachment.kind == "image"
    assert attachment.sha256 == hashlib.sha256(data).hexdigest()
    assert attachment.size == len(data)
    original = tmp_path / "attachments" / attachment.sha256[:2] / attachment.sha256
    assert original.read_bytes() == data
    mime, first = store.load(attachment)
    assert mime == "image/jpeg"
    assert b"SecretCamera" not in first and b"Exif" not in first
    # a fresh store (a restart) with the cache gone decodes again: the same bytes
    for cached in (tmp_path / "attachments" / "normalized").rglob("*.jpg"):
        cached.unlink()
    assert AttachmentStore(tmp_path / "attachments", max_side=1024).load(attachment) == (
        mime,
        first,
    )
    assert normalize(data, 1024) == (mime, first)
    assert not list((tmp_path / "attachments").rglob("*.tmp"))


def test_store_downscales_to_the_longest_side(tmp_path: Path) -> None:
    store = AttachmentStore(tmp_path, max_side=512)
    attachment = store.put(png(1600, 400, seed=3), "wide.png")
    mime, data = store.load(attachment)
    assert mime == "image/png"
    with Image.open(io.BytesIO(data)) as image:
        assert image.size == (512, 128)
        assert image.mode == "RGB"
    small = store.put(png(100, 50, seed=4), "small.png")
    with Image.open(io.BytesIO(store.load(small)[1])) as image:
        assert image.size == (100, 50)  # never upscaled


def test_store_takes_the_first_frame_of_an_animated_gif(tmp_path: Path) -> None:
    frames = [Image.new("RGB", (64, 64), colour) for colour in ((255, 0, 0), (0, 0, 255))]
    out = io.BytesIO()
    frames[0].save(out, format="GIF", save_all=True, append_images=frames[1:], duration=100)
    store = AttachmentStore(tmp_path)
    attachment = store.put(out.getvalue(), "anim.gif")
    assert attachment.mime == "image/gif"
    mime, data = store.load(attachment)
    assert mime == "image/png"
    with Image.open(io.BytesIO(data)) as image:
        assert getattr(image, "n_frames", 1) == 1
        red, green, blue = image.getpixel((32, 32))
        assert red > 200 and blue < 50


def bomb_png(side: int) -> bytes:
    """A PNG whose header claims ``side``×``side`` pixels, with a few rows of real data."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    rows = zlib.compress(b"\x00" * (side + 1) * 4, 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", rows)


@pytest.mark.parametrize("side", [8_000, 40_000])  # under and over Pillow's own limit
def test_store_refuses_a_decompression_bomb(tmp_path: Path, side: int) -> None:
    store = AttachmentStore(tmp_path, max_pixels=50_000_000)
    with pytest.raises(AttachmentRefusedError, match=r"bomb\.png: image refused: .*pixels"):
        store.put(bomb_png(side), "bomb.png")
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_store_refuses_what_is_not_an_image(tmp_path: Path) -> None:
    store = AttachmentStore(tmp_path, max_bytes=1000)
    with pytest.raises(AttachmentRefusedError, match=r"^notes\.png refused: .*not an image"):
        store.put(b"these are notes, not pixels", "notes.png")  # the name says png
    truncated = png(64, 64, seed=1)[:60]
    with pytest.raises(AttachmentRefusedError, match=r"^broken\.png: .*corrupt"):
        store.put(truncated, "broken.png")
    with pytest.raises(AttachmentRefusedError, match=r"^big\.png refused: .*MB limit"):
        store.put(png(64, 64, seed=2), "big.png")
    assert not any(p.is_file() for p in tmp_path.rglob("*"))
    assert store.save(b"not an image", "image/png", "x.png") is None


def test_sniff_reads_the_magic_numbers() -> None:
    assert sniff_mime(png(2, 2)) == "image/png"
    assert sniff_mime(b"RIFF\x00\x00\x00\x00WEBPVP8 ") == "image/webp"
    assert sniff_mime(b"GIF89a....") == "image/gif"
    assert sniff_mime(b"%PDF-1.7") is None


def test_store_load_of_a_missing_file_is_none(tmp_path: Path) -> None:
    store = AttachmentStore(tmp_path)
    attachment = store.put(png(8, 8), "a.png")
    for path in tmp_path.rglob("*"):
        if path.is_file():
            path.unlink()
    assert store.load(attachment) is None
