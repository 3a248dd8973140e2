"""``/attach`` in the real ``python -m luna`` REPL: files reach the model, bad ones get a line."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.fakes.attachments import pdf, photo, png_bomb
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.test_repl import start_repl


def test_repl_attach_sends_files_with_the_next_message(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    (tmp_path / "photo.jpg").write_bytes(photo(1600, 1200))
    (tmp_path / "notes.png").write_bytes(b"not a picture at all")
    (tmp_path / "bomb.png").write_bytes(png_bomb())
    (tmp_path / "receipt.pdf").write_bytes(pdf(["Coffee 3.20 EUR", "Total 3.20 EUR"]))
    llm_server.script(Reply(content="A photo and a receipt."), Reply(content="Plain."))
    proc = start_repl(tmp_path, llm_server.url)
    script = (
        "/help\n/attach photo.jpg\n/attach notes.png\n/attach bomb.png\n/attach receipt.pdf\n"
        "/attach missing.jpg\n/attach\nwhat are these?\nand now no file\n"
    )
    out, err = proc.communicate(script, timeout=180)
    assert proc.returncode == 0, err
    assert "/attach PATH" in out  # /help lists it
    assert "attached photo.jpg (" in out and "4 files waiting" in out
    assert "cannot attach missing.jpg: No such file or directory" in out
    assert "usage: /attach PATH" in out
    assert "[not taken: notes.png: not an image: its bytes are text]" in out
    assert "[not taken: bomb.png: 12000x12000 pixels is over" in out
    assert "A photo and a receipt." in out and "Plain." in out

    first = llm_server.requests[0]["messages"][-1]
    text = first["content"] if isinstance(first["content"], str) else str(first["content"])
    assert text.startswith("what are these?")
    assert "[document receipt.pdf (PDF, 948 bytes): PDF, 2 pages]" in text
    assert "Coffee 3.20 EUR" in text and "Total 3.20 EUR" in text
    assert "[not taken: notes.png: not an image: its bytes are text]" in text
    assert "photo.jpg" in text  # the image's line (this server cannot see)
    second = llm_server.requests[1]["messages"][-1]
    assert "receipt" not in str(second["content"])  # the files went with one message only

    with sqlite3.connect(tmp_path / "data" / "luna.db") as db:
        rows = db.execute(
            "SELECT a.name, a.kind, a.mime FROM message_attachments a "
            "JOIN messages m ON m.id = a.message_id WHERE m.role = 'user' ORDER BY a.position"
        ).fetchall()
    assert rows == [("photo.jpg", "image", "image/jpeg"), ("receipt.pdf", "document",
                    "application/pdf")]  # fmt: skip
    stored = sorted(p.name for p in (tmp_path / "data" / "attachments").glob("??/*"))
    assert len(stored) == 2
