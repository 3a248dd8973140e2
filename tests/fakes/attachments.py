"""Files for the attachments tests, made here: real images (Pillow), bombs, broken files, PDFs.

Each maker returns bytes a sender could really send; none needs a file from the network.
"""

from __future__ import annotations

import io
import struct
import zipfile
import zlib

from PIL import Image


def photo(width: int = 800, height: int = 600, *, fmt: str = "JPEG", seed: int = 1) -> bytes:
    """A picture with structure (gradients and a grid), so a resize has something to do."""
    size = (width, height)
    red = Image.linear_gradient("L").rotate(90).resize(size)
    green = Image.linear_gradient("L").resize(size)
    blue = Image.radial_gradient("L").resize(size).point(lambda v: (v + seed * 37) % 256)
    image = Image.merge("RGB", (red, green, blue))
    out = io.BytesIO()
    image.save(out, fmt)
    return out.getvalue()


def photo_with_exif(width: int = 640, height: int = 480, orientation: int = 6) -> bytes:
    """A JPEG carrying EXIF: a camera, GPS coordinates and a rotation (6: turn 90° clockwise)."""
    image = Image.open(io.BytesIO(photo(width, height)))
    exif = Image.Exif()
    exif[0x010F] = "PhoneMaker"  # Make
    exif[0x0112] = orientation
    exif[0x8825] = {1: "N", 2: (52.0, 31.0, 12.0), 3: "E", 4: (13.0, 24.0, 36.0)}  # GPS
    out = io.BytesIO()
    image.save(out, "JPEG", exif=exif)
    return out.getvalue()


def animated_gif(frames: int = 3, size: int = 64) -> bytes:
    """A GIF whose frames are red, green, blue, ... in turn."""
    colours = [(255, 0, 0), (0, 255, 0), (0, 0, 255)]
    images = [Image.new("RGB", (size, size), colours[i % 3]) for i in range(frames)]
    out = io.BytesIO()
    images[0].save(out, "GIF", save_all=True, append_images=images[1:], duration=100, loop=0)
    return out.getvalue()


def _chunk(kind: bytes, data: bytes) -> bytes:
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def png_bomb(side: int = 12_000) -> bytes:
    """A real decompression bomb: a 1-bit PNG of ``side`` x ``side`` zeros, a few KB on disk
    (12,000 x 12,000 is 144 million pixels, 432 MB decoded as RGB)."""
    row = b"\x00" + b"\x00" * ((side + 7) // 8)
    packer = zlib.compressobj(9)
    body = b"".join(packer.compress(row * 1000) for _ in range(side // 1000))
    body += packer.compress(row * (side % 1000)) + packer.flush()
    header = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + _chunk(b"IHDR", header)
        + _chunk(b"IDAT", body)
        + _chunk(b"IEND", b"")
    )


def truncated(data: bytes, keep: float = 0.5) -> bytes:
    """The first part of a file, as an interrupted upload leaves it."""
    return data[: max(1, int(len(data) * keep))]


SVG = b"""<?xml version="1.0" encoding="UTF-8"?>
<svg xmlns="http://www.w3.org/2000/svg" width="10" height="10"><rect width="10" height="10"/></svg>
"""


def pdf(pages: list[str], *, password: str | None = None) -> bytes:
    """A PDF whose pages carry these texts (Helvetica, one line each); an empty string makes a
    page with no text. With ``password``: encrypted (AES-256), opened only with it."""
    from pypdf import PdfWriter
    from pypdf.generic import DecodedStreamObject, DictionaryObject, NameObject

    writer = PdfWriter()
    font = writer._add_object(
        DictionaryObject(
            {
                NameObject("/Type"): NameObject("/Font"),
                NameObject("/Subtype"): NameObject("/Type1"),
                NameObject("/BaseFont"): NameObject("/Helvetica"),
            }
        )
    )
    fonts = DictionaryObject({NameObject("/F1"): font})
    resources = DictionaryObject({NameObject("/Font"): fonts})
    for text in pages:
        page = writer.add_blank_page(612, 792)
        if text:
            stream = DecodedStreamObject()
            stream.set_data(f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode("latin-1"))
            page[NameObject("/Contents")] = writer._add_object(stream)
            page[NameObject("/Resources")] = resources
    if password is not None:
        writer.encrypt(password, algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def scanned_pdf() -> bytes:
    """A one-page PDF holding only a picture, as a scanner makes it: no text layer."""
    out = io.BytesIO()
    Image.open(io.BytesIO(photo(400, 300))).save(out, "PDF")
    return out.getvalue()


def docx(paragraphs: list[str]) -> bytes:
    """A minimal Word document (the parts Word itself needs to open it)."""
    body = "".join(f"<w:p><w:r><w:t>{p}</w:t></w:r></w:p>" for p in paragraphs)
    ns = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    parts = {
        "[Content_Types].xml": (
            '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/'
            'content-types"><Default Extension="xml" ContentType="application/xml"/></Types>'
        ),
        "word/document.xml": f'<?xml version="1.0"?><w:document xmlns:w="{ns}"><w:body>{body}'
        "</w:body></w:document>",
    }
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, text in parts.items():
            archive.writestr(name, text)
    return out.getvalue()
