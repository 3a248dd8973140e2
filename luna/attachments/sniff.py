"""What a file is, read from its bytes: the MIME type and kind Luna trusts.

Invariants:
- The bytes decide, never the name or the sender's claim: a ``photo.png`` holding text is
  text, a PDF named ``notes.txt`` is a PDF.
- ``kind`` is "image" only for the formats ``luna.attachments.images`` decodes (PNG, JPEG,
  GIF, WebP, BMP): a model is never sent an image it cannot take. Other pictures (SVG, HEIC,
  TIFF) are sniffed as what they are, kind "other", with ``note`` saying why they are not shown.
- "document" is what ``luna.attachments.documents`` turns into text: PDF, Word, Excel,
  PowerPoint, OpenDocument text, and UTF-8 (or UTF-16 with a byte-order mark) text.
- Magic numbers, a zip's list of names and a UTF-8 check: no library guesses here. Blocking
  only for a zip (its central directory is read); cheap otherwise.
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass

from luna.messages import AttachmentKind

OCTET = "application/octet-stream"
PDF = "application/pdf"
DOCX = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
XLSX = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
PPTX = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
ODT = "application/vnd.oasis.opendocument.text"
SVG = "image/svg+xml"
TEXT = "text/plain"

# (prefix at offset 0, mime, kind)
_MAGIC: tuple[tuple[bytes, str, AttachmentKind], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png", "image"),
    (b"\xff\xd8\xff", "image/jpeg", "image"),
    (b"GIF87a", "image/gif", "image"),
    (b"GIF89a", "image/gif", "image"),
    (b"%PDF-", PDF, "document"),
    (b"II*\x00", "image/tiff", "other"),
    (b"MM\x00*", "image/tiff", "other"),
    (b"OggS", "audio/ogg", "audio"),
    (b"fLaC", "audio/flac", "audio"),
    (b"ID3", "audio/mpeg", "audio"),
    (b"\x1f\x8b", "application/gzip", "other"),
    (b"7z\xbc\xaf\x27\x1c", "application/x-7z-compressed", "other"),
    (b"Rar!\x1a\x07", "application/vnd.rar", "other"),
)
# ISO base media (``....ftypXXXX``): brand -> (mime, kind)
_FTYP: dict[bytes, tuple[str, AttachmentKind]] = {
    b"heic": ("image/heic", "other"),
    b"heix": ("image/heic", "other"),
    b"mif1": ("image/heif", "other"),
    b"avif": ("image/avif", "other"),
    b"M4A ": ("audio/mp4", "audio"),
    b"isom": ("video/mp4", "other"),
    b"mp41": ("video/mp4", "other"),
    b"mp42": ("video/mp4", "other"),
    b"qt  ": ("video/quicktime", "other"),
}
_SVG = re.compile(rb"^\s*(?:<\?xml[^>]*>\s*)?(?:<!--.*?-->\s*|<!DOCTYPE[^>]*>\s*)*<svg[\s>]", re.S)
NOTES = {
    SVG: "an SVG drawing is not rendered: send it as a PNG or JPEG for the model to see it",
    "image/heic": "HEIC photos are not read: send it as a JPEG",
    "image/heif": "HEIF pictures are not read: send it as a JPEG",
    "image/avif": "AVIF pictures are not read: send it as a JPEG or PNG",
    "image/tiff": "TIFF pictures are not read: send it as a PNG or JPEG",
}


@dataclass(frozen=True)
class Sniffed:
    """What the bytes are: ``mime``, ``kind``, and for a file Luna keeps but cannot show or
    read, ``note``: one line saying so."""

    mime: str
    kind: AttachmentKind
    note: str = ""


def sniff(data: bytes) -> Sniffed:
    """The type of ``data`` (see the module invariants)."""
    head = data[:64]
    for prefix, mime, kind in _MAGIC:
        if head.startswith(prefix):
            return Sniffed(mime, kind, NOTES.get(mime, ""))
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return Sniffed("image/webp", "image")
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        return Sniffed("audio/wav", "audio")
    if head[:2] == b"BM" and len(data) > 26 and int.from_bytes(data[14:18], "little") in (
        12, 40, 52, 56, 64, 108, 124,  # the sizes a BMP info header comes in
    ):  # fmt: skip
        return Sniffed("image/bmp", "image")
    if head[4:8] == b"ftyp" and head[8:12] in _FTYP:
        mime, kind = _FTYP[head[8:12]]
        return Sniffed(mime, kind, NOTES.get(mime, ""))
    if head.startswith(b"PK\x03\x04"):
        return _zip(data)
    if (head.startswith(b"\xff\xfb") or head.startswith(b"\xff\xf3")) and len(data) > 1024:
        return Sniffed("audio/mpeg", "audio")
    text = as_text(data)
    if text is not None:
        if _SVG.match(data[:4096].lstrip(b"\xef\xbb\xbf")):
            return Sniffed(SVG, "other", NOTES[SVG])
        return Sniffed(TEXT, "document")
    return Sniffed(OCTET, "other")


def as_text(data: bytes) -> str | None:
    """``data`` as text when it is text: UTF-8 (a BOM allowed) or UTF-16 with a BOM, with no
    NUL and few other control characters; else None."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError:
            return None
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            return None
    if "\x00" in text:
        return None
    controls = sum(1 for c in text[:65536] if c < " " and c not in "\n\r\t\f\v\x1b")
    return text if controls <= len(text[:65536]) // 100 else None


def _zip(data: bytes) -> Sniffed:
    """A zip: an Office or OpenDocument file by the names inside it, else an archive."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            names = set(archive.namelist())
            if "mimetype" in names:
                declared = archive.read("mimetype")[:100].decode("ascii", "replace").strip()
                if declared == ODT:
                    return Sniffed(ODT, "document")
    except (zipfile.BadZipFile, OSError, ValueError, KeyError):
        return Sniffed("application/zip", "other")
    if "[Content_Types].xml" in names:
        if "word/document.xml" in names:
            return Sniffed(DOCX, "document")
        if "xl/workbook.xml" in names:
            return Sniffed(XLSX, "document")
        if "ppt/presentation.xml" in names:
            return Sniffed(PPTX, "document")
    return Sniffed("application/zip", "other")
