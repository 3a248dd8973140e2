"""Sniffing: the bytes decide the type, never the name."""

from __future__ import annotations

import pytest

from luna.attachments.sniff import DOCX, OCTET, PDF, SVG, TEXT, sniff
from tests.fakes.attachments import SVG as SVG_BYTES
from tests.fakes.attachments import animated_gif, docx, pdf, photo


@pytest.mark.parametrize(
    ("data", "mime", "kind"),
    [
        (photo(20, 10, fmt="PNG"), "image/png", "image"),
        (photo(20, 10), "image/jpeg", "image"),
        (photo(20, 10, fmt="WEBP"), "image/webp", "image"),
        (photo(20, 10, fmt="BMP"), "image/bmp", "image"),
        (animated_gif(), "image/gif", "image"),
        (photo(20, 10, fmt="TIFF"), "image/tiff", "other"),
        (pdf(["hello"]), PDF, "document"),
        (docx(["hello"]), DOCX, "document"),
        ("héllo, plain text\n".encode(), TEXT, "document"),
        ("\ufeffwith a BOM".encode(), TEXT, "document"),
        ("utf-16 text".encode("utf-16"), TEXT, "document"),
        (SVG_BYTES, SVG, "other"),
        (b"\x00\x01\x02binary\xff", OCTET, "other"),
        (b"\x00\x00\x00\x18ftypheic" + b"\x00" * 20, "image/heic", "other"),
        (b"PK\x03\x04 not really a zip", "application/zip", "other"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_sniff_reads_the_type_from_the_bytes(data: bytes, mime: str, kind: str) -> None:
    found = sniff(data)
    assert (found.mime, found.kind) == (mime, kind)


def test_sniff_says_why_an_svg_or_heic_is_not_shown() -> None:
    assert "not rendered" in sniff(SVG_BYTES).note
    assert "JPEG" in sniff(b"\x00\x00\x00\x18ftypheic" + b"\x00" * 20).note
    assert sniff(photo(20, 10)).note == ""
