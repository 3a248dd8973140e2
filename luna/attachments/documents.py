"""Documents as text: PDFs (pypdf), Office files (``luna.attachments.office``) and plain text.

pypdf, not markitdown: one pure-Python package with no dependencies, against markitdown's
thirteen for the same formats (pandas, magika, pdfminer.six, pdfplumber, pypdfium2's native
library, mammoth, openpyxl, python-pptx...), on a box that already carries torch. pypdf also
tells what Luna must say honestly: that a PDF is encrypted, how many pages it has (so a
2,000-page one is read up to ``attachments.max_pages``), and which pages have no text layer.

Invariants:
- Every outcome is a ``DocumentText`` with a one-line ``note`` a person can read: "PDF, 12
  pages", "read the first 200 of 2,000 pages", "no text layer (a scan?)", "encrypted with a
  password: not read", "damaged: ...". Converting never raises for a bad file.
- PDFs and Office files are converted in a child process (``luna.attachments.convert``) with
  a time limit and a memory limit, killed when over: a hostile file costs one process, never
  the daemon's loop, memory or a stuck thread. Plain text is decoded in a worker thread.
- The text is at most ``MAX_CHARS``; ``is_cut`` says when it was cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import sys
from dataclasses import asdict, dataclass

from luna.attachments.office import READERS, OfficeError, office_text
from luna.attachments.sniff import PDF, TEXT, as_text

log = logging.getLogger(__name__)

MAX_CHARS = 1_000_000
CONVERT_TIMEOUT = 60.0
LABELS = {
    PDF: "PDF",
    TEXT: "text",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "Word document",
    "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet": "Excel workbook",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "PowerPoint",
    "application/vnd.oasis.opendocument.text": "OpenDocument text",
}


@dataclass(frozen=True)
class DocumentText:
    """A document's text and one honest line about it."""

    text: str
    note: str
    is_cut: bool = False  # the text stops early (pages capped, or MAX_CHARS reached)


def is_convertible(mime: str) -> bool:
    return mime in LABELS


def _pages(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:10])
    return shown + (f" and {len(numbers) - 10} more" if len(numbers) > 10 else "")


def pdf_text(data: bytes, max_pages: int, max_chars: int = MAX_CHARS) -> DocumentText:
    """A PDF's text layer, page by page, up to ``max_pages`` pages and ``max_chars``."""
    from pypdf import PdfReader  # in the converter process only
    from pypdf.errors import DependencyError, PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            try:
                opened: int = reader.decrypt("")  # many PDFs are "encrypted" with no password
            except (DependencyError, NotImplementedError, PyPdfError):
                opened = 0
            if not opened:
                return DocumentText("", "PDF encrypted with a password: not read")
        total = len(reader.pages)
        parts: list[str] = []
        blank: list[int] = []
        used, read = 0, 0
        for number in range(1, min(total, max_pages) + 1):
            text = (reader.pages[number - 1].extract_text() or "").strip()
            read = number
            if not text:
                blank.append(number)
                continue
            parts.append(f"--- page {number} ---\n{text}")
            used += len(parts[-1]) + 1
            if used >= max_chars:
                break
    except Exception as e:  # pypdf raises many types for a broken file
        return DocumentText("", f"PDF damaged, not read ({type(e).__name__}: {e})"[:300])
    body = "\n".join(parts)[:max_chars]
    notes = [f"PDF, {total} page{'s' if total != 1 else ''}"]
    if read < total:
        cap = "attachments.max_pages" if read == max_pages else "the text limit"
        notes.append(f"read the first {read} of {total:,} pages ({cap})")
    if blank and not parts:
        notes.append("no text layer (a scan or pictures only): its pages were not read")
    elif blank:
        notes.append(f"no text layer on page{'s' if len(blank) > 1 else ''} {_pages(blank)}")
    return DocumentText(body, "; ".join(notes), is_cut=read < total or used >= max_chars)


def extract(data: bytes, mime: str, max_pages: int, max_chars: int = MAX_CHARS) -> DocumentText:
    """The text of a document (blocking; PDFs and Office files belong in the child process)."""
    label = LABELS.get(mime, mime)
    if mime == PDF:
        return pdf_text(data, max_pages, max_chars)
    if mime in READERS:
        try:
            text, cut = office_text(data, mime, max_chars)
        except OfficeError as e:
            return DocumentText("", f"{label} not read: {e}"[:300])
        note = label + ("" if text.strip() else ", no text in it")
        return DocumentText(text, note + ("; cut at the text limit" if cut else ""), cut)
    plain = as_text(data)
    if plain is None:
        return DocumentText("", "not a document Luna reads")
    cut = len(plain) > max_chars
    return DocumentText(plain[:max_chars], "text" + ("; cut at the text limit" if cut else ""), cut)


async def convert(data: bytes, mime: str, max_pages: int) -> DocumentText:
    """The text of a document, converted off the event loop (see the module invariants)."""
    if mime not in (PDF, *READERS):
        return await asyncio.to_thread(extract, data, mime, max_pages)
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "luna.attachments.convert",
        mime,
        str(max_pages),
        str(MAX_CHARS),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        async with asyncio.timeout(CONVERT_TIMEOUT):
            out, err = await proc.communicate(data)
    except TimeoutError:
        return DocumentText(
            "", f"{LABELS[mime]} not read: converting took over {CONVERT_TIMEOUT:g} s"
        )
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
    try:
        return DocumentText(**json.loads(out))
    except (ValueError, TypeError):
        log.warning("document converter failed (exit %s): %s", proc.returncode, err[-2000:])
        why = "it needs too much memory" if proc.returncode else "the converter failed"
        return DocumentText("", f"{LABELS[mime]} not read: {why}")


def to_json(document: DocumentText) -> str:
    return json.dumps(asdict(document), ensure_ascii=False)
