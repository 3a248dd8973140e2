"""A PNG with a damaged ancillary chunk is read as libpng reads it: the chunk is dropped.

server-everything's ``get-tiny-image`` is such a file (a wrong CRC in its iCCP chunk), so an
MCP tool's image was refused before it reached a model that can see."""

from __future__ import annotations

import struct
import zlib

import pytest

from luna.attachments.images import NotAnImageError, normalize
from luna.attachments.png_chunks import SIGNATURE, without_damaged_ancillary_chunks
from tests.fakes.images import png


def _chunk(kind: bytes, data: bytes, *, crc: int | None = None) -> bytes:
    checksum = zlib.crc32(kind + data) if crc is None else crc
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", checksum)


def _with_chunk(image: bytes, chunk: bytes) -> bytes:
    """``image`` with ``chunk`` right after its IHDR (where iCCP sits)."""
    after_ihdr = len(SIGNATURE) + 8 + 13 + 4
    return image[:after_ihdr] + chunk + image[after_ihdr:]


def test_png_chunks_drop_a_damaged_colour_profile_and_the_image_normalizes() -> None:
    clean = png(24, 16, seed=4)
    damaged = _with_chunk(clean, _chunk(b"iCCP", b"profile\x00\x00xyz", crc=1))
    assert without_damaged_ancillary_chunks(damaged) == clean
    assert normalize(damaged, 1024).data == normalize(clean, 1024).data


def test_png_chunks_keep_sound_chunks_and_leave_other_bytes_alone() -> None:
    sound = _with_chunk(png(8, 8), _chunk(b"tEXt", b"Comment\x00hello"))
    assert without_damaged_ancillary_chunks(sound) is sound
    jpeg_like = b"\xff\xd8\xff\xe0 not a png"
    assert without_damaged_ancillary_chunks(jpeg_like) is jpeg_like
    cut = sound[:40]  # a chunk runs past the end: unchanged, Pillow says it is damaged
    assert without_damaged_ancillary_chunks(cut) is cut


def test_png_chunks_never_drop_a_critical_chunk() -> None:
    image = png(8, 8)
    bad_header = image[:29] + struct.pack(">I", 0) + image[33:]  # IHDR's CRC zeroed
    assert without_damaged_ancillary_chunks(bad_header) is bad_header
    with pytest.raises(NotAnImageError):
        normalize(bad_header, 1024)
