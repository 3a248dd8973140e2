"""Text out of Office files: Word, Excel and PowerPoint (Office Open XML) and OpenDocument text.

These formats are zip files of XML whose text sits in a few known elements (``w:t`` in a Word
paragraph, ``a:t`` on a slide, a spreadsheet's shared strings and cells, ``text:p`` in an
OpenDocument): the standard library reads them, with no dependency tree to install.

Invariants:
- A part with a DTD (``<!DOCTYPE``/``<!ENTITY``) is refused before it is parsed: Office files
  have none, and entity tricks (billion laughs, external entities) need one.
- No member is read past ``MAX_PART_BYTES`` uncompressed (a zip bomb stops there), and the
  text returned stops at ``max_chars``.
- Order is the reader's: paragraphs in document order, slides and sheets by number.
- Blocking, pure: called in the converter process (``luna.attachments.convert``).
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
import zipfile
import zlib
from collections.abc import Iterator

from luna.attachments.sniff import DOCX, ODT, PPTX, XLSX

MAX_PART_BYTES = 64 * 1024 * 1024
W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
A = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
S = "{http://schemas.openxmlformats.org/spreadsheetml/2006/main}"
TEXT_NS = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
_NUMBER = re.compile(r"(\d+)\.xml\Z")


class OfficeError(ValueError):
    """The file is not the Office document it looked like, or a part of it is unsafe."""


def _part(archive: zipfile.ZipFile, name: str) -> ET.Element:
    info = archive.getinfo(name)
    if info.file_size > MAX_PART_BYTES:
        raise OfficeError(f"{name} is {info.file_size:,} bytes unpacked: too large to read")
    with archive.open(info) as f:
        data = f.read(MAX_PART_BYTES + 1)
    if len(data) > MAX_PART_BYTES:
        raise OfficeError(f"{name} unpacks past {MAX_PART_BYTES:,} bytes: too large to read")
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise OfficeError(f"{name} declares a DTD, which no Office file has: not read")
    try:
        return ET.fromstring(data)
    except ET.ParseError as e:
        raise OfficeError(f"{name} is damaged ({e})") from None


def _numbered(names: list[str], folder: str) -> list[str]:
    numbered = [(n, _NUMBER.search(n)) for n in names if n.startswith(folder)]
    found = [(int(m.group(1)), n) for n, m in numbered if m]
    return [n for _, n in sorted(found)]


def _word(archive: zipfile.ZipFile) -> Iterator[str]:
    for para in _part(archive, "word/document.xml").iter(f"{W}p"):
        pieces = []
        for node in para.iter():
            if node.tag == f"{W}t" and node.text:
                pieces.append(node.text)
            elif node.tag == f"{W}tab":
                pieces.append("\t")
            elif node.tag in (f"{W}br", f"{W}cr"):
                pieces.append("\n")
        yield "".join(pieces)


def _slides(archive: zipfile.ZipFile) -> Iterator[str]:
    for i, name in enumerate(_numbered(archive.namelist(), "ppt/slides/slide"), 1):
        yield f"--- slide {i} ---"
        for para in _part(archive, name).iter(f"{A}p"):
            line = "".join(t.text or "" for t in para.iter(f"{A}t"))
            if line.strip():
                yield line


def _sheets(archive: zipfile.ZipFile) -> Iterator[str]:
    names = archive.namelist()
    shared: list[str] = []
    if "xl/sharedStrings.xml" in names:
        for item in _part(archive, "xl/sharedStrings.xml").iter(f"{S}si"):
            shared.append("".join(t.text or "" for t in item.iter(f"{S}t")))
    for i, name in enumerate(_numbered(names, "xl/worksheets/sheet"), 1):
        yield f"--- sheet {i} ---"
        for row in _part(archive, name).iter(f"{S}row"):
            cells = []
            for cell in row.iter(f"{S}c"):
                value = cell.find(f"{S}v")
                if cell.get("t") == "s" and value is not None and (value.text or "").isdigit():
                    index = int(value.text or 0)
                    cells.append(shared[index] if index < len(shared) else "")
                elif cell.get("t") == "inlineStr":
                    cells.append("".join(t.text or "" for t in cell.iter(f"{S}t")))
                else:
                    cells.append(value.text or "" if value is not None else "")
            if any(c.strip() for c in cells):
                yield "\t".join(cells)


def _opendocument(archive: zipfile.ZipFile) -> Iterator[str]:
    for node in _part(archive, "content.xml").iter():
        if node.tag in (f"{TEXT_NS}p", f"{TEXT_NS}h"):
            yield "".join(node.itertext())


READERS = {DOCX: _word, PPTX: _slides, XLSX: _sheets, ODT: _opendocument}


def office_text(data: bytes, mime: str, max_chars: int) -> tuple[str, bool]:
    """(text, whether it was cut at ``max_chars``) of an Office document of type ``mime``."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as e:
        raise OfficeError(f"damaged ({e})") from None
    out: list[str] = []
    used = 0
    with archive:
        try:
            for line in READERS[mime](archive):
                if used + len(line) + 1 > max_chars:
                    out.append(line[: max(0, max_chars - used)])
                    return "\n".join(out), True
                out.append(line)
                used += len(line) + 1
        except KeyError as e:
            raise OfficeError(f"damaged: a part is missing ({e})") from None
        except (zipfile.BadZipFile, OSError, EOFError, zlib.error, RuntimeError) as e:
            raise OfficeError(f"damaged ({e})") from None
    return "\n".join(out), False
