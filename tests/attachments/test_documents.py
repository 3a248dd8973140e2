"""Documents as text, each bad one with an honest line: through the real converter process."""

from __future__ import annotations

import io
import time
import zipfile

from luna.attachments.documents import convert
from luna.attachments.sniff import DOCX, PDF, TEXT
from tests.fakes.attachments import docx, pdf, scanned_pdf, truncated


async def test_convert_reads_a_pdf_page_by_page_and_names_blank_pages() -> None:
    doc = await convert(pdf(["Invoice 2291", "", "Total 42 EUR"]), PDF, 200)
    assert doc.text == "--- page 1 ---\nInvoice 2291\n--- page 3 ---\nTotal 42 EUR"
    assert doc.note == "PDF, 3 pages; no text layer on page 2" and not doc.is_cut


async def test_convert_caps_a_2000_page_pdf() -> None:
    started = time.monotonic()
    doc = await convert(pdf([f"page text {i}" for i in range(1, 2001)]), PDF, 200)
    assert doc.note == "PDF, 2000 pages; read the first 200 of 2,000 pages (attachments.max_pages)"
    assert doc.is_cut and "page text 200" in doc.text and "page text 201" not in doc.text
    assert time.monotonic() - started < 30


async def test_convert_says_a_scan_has_no_text_layer() -> None:
    doc = await convert(scanned_pdf(), PDF, 200)
    assert doc.text == ""
    assert (
        doc.note == "PDF, 1 page; no text layer (a scan or pictures only): its pages were not read"
    )


async def test_convert_refuses_an_encrypted_pdf_but_opens_one_without_a_password() -> None:
    locked = await convert(pdf(["secret plans"], password="hunter2"), PDF, 200)
    assert (locked.text, locked.note) == ("", "PDF encrypted with a password: not read")
    opened = await convert(pdf(["open plans"], password=""), PDF, 200)
    assert "open plans" in opened.text


async def test_convert_says_a_broken_pdf_is_damaged() -> None:
    for broken in (truncated(pdf(["some text"] * 5), 0.4), b"%PDF-1.7\nnothing else"):
        doc = await convert(broken, PDF, 200)
        assert doc.text == "" and doc.note.startswith("PDF damaged, not read (")


async def test_convert_reads_word_and_text() -> None:
    word = await convert(docx(["First paragraph", "Second one"]), DOCX, 200)
    assert (word.text, word.note) == ("First paragraph\nSecond one", "Word document")
    broken = await convert(truncated(docx(["x"] * 50), 0.5), DOCX, 200)
    assert broken.note.startswith("Word document not read: damaged")
    plain = await convert(b"notes\nline two", TEXT, 200)
    assert (plain.text, plain.note) == ("notes\nline two", "text")


async def test_convert_refuses_a_word_file_with_a_dtd() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(docx(["x"]))) as src, zipfile.ZipFile(out, "w") as dst:
        for name in src.namelist():
            data = src.read(name)
            if name == "word/document.xml":
                data = data.replace(b"?>", b'?><!DOCTYPE x [<!ENTITY a "aaaa">]>', 1)
            dst.writestr(name, data)
    doc = await convert(out.getvalue(), DOCX, 200)
    assert doc.text == "" and "DTD" in doc.note
