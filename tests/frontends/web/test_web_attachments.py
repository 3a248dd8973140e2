"""Files through the web front-end's real HTTP entry points: the OpenAI API with the ``openai``
SDK (``image_url`` parts) and Luna's own API (multipart, as the page sends them)."""

from __future__ import annotations

import base64
import http.server
import sqlite3
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.fakes.attachments import SVG, animated_gif, pdf, photo, png_bomb, truncated
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.web.test_web_openai import sdk
from tests.mcp.mcp_helpers import wait_until


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


def user_text(request: dict[str, Any]) -> str:
    content = request["messages"][-1]["content"]
    if isinstance(content, str):
        return content
    return "\n".join(p.get("text", "") for p in content if p.get("type") == "text")


def stored(luna: Any) -> list[tuple[str, str, str]]:
    with sqlite3.connect(luna.cfg.memory.db_path) as db:
        return db.execute(
            "SELECT name, kind, mime FROM message_attachments ORDER BY message_id, position"
        ).fetchall()


@pytest.fixture
def local_image_server() -> Iterator[tuple[str, list[str]]]:
    """A real HTTP server on loopback serving a PNG: an image URL Luna must refuse to fetch."""
    hits: list[str] = []
    body = photo(50, 50, fmt="PNG")

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "image/png")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.005,), daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/cat.png", hits
    finally:
        server.shutdown()
        server.server_close()


async def test_openai_image_url_parts_reach_the_model_and_bad_ones_get_a_line(
    web_luna: Callable[..., Any],
    llm_server: FakeLLMServer,
    local_image_server: tuple[str, list[str]],
) -> None:
    luna = await web_luna()
    loopback_url, hits = local_image_server
    llm_server.script(Reply(content="One photo; two were refused."))
    async with sdk(luna) as client:
        done = await client.chat.completions.create(
            model="luna",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "What is in these?"},
                        {"type": "image_url", "image_url": {"url": data_url(photo(1400, 1000))}},
                        {"type": "image_url", "image_url": {"url": loopback_url}},
                        {"type": "image_url", "image_url": {"url": "http://10.1.2.3/x.png"}},
                        {"type": "image_url", "image_url": {"url": data_url(b"plain words")}},
                        {"type": "image_url", "image_url": {"url": data_url(png_bomb())}},
                        {
                            "type": "image_url",
                            "image_url": {"url": data_url(animated_gif(), "image/gif")},
                        },
                        {"type": "image_url", "image_url": {"url": data_url(truncated(photo()))}},
                    ],
                }
            ],
        )
    assert (done.choices[0].message.content or "").startswith("One photo; two were refused.")
    text = user_text(llm_server.requests[0])
    assert text.startswith("What is in these?")
    assert (
        "[not taken: cat.png: not fetched: refused: 127.0.0.1 resolves to a non-public address"
        in text
    )
    assert "[not taken: x.png: not fetched: refused: 10.1.2.3 resolves to a non-public" in text
    assert "[not taken: image-4.png: not an image: its bytes are text]" in text
    assert "[not taken: image-5.png: 12000x12000 pixels is over the" in text
    assert "[not taken: image-7.png: the image is damaged and cannot be decoded" in text
    assert hits == []  # the loopback server was never asked
    assert stored(luna) == [("image-1.png", "image", "image/jpeg"), ("image-6.gif", "image",
                            "image/gif")]  # fmt: skip


async def test_openai_message_with_only_an_image_is_a_turn(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    luna = await web_luna()
    llm_server.script(Reply(content="A gradient."))
    async with sdk(luna) as client:
        done = await client.chat.completions.create(
            model="luna",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": data_url(photo(64, 64))}}
                    ],
                }
            ],
        )
    assert (done.choices[0].message.content or "").startswith("A gradient.")
    assert [name for name, _, _ in stored(luna)] == ["image-1.png"]


async def test_page_api_multipart_takes_files_and_says_what_was_refused(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    luna = await web_luna()
    llm_server.script(Reply(content="Read them."))
    big = photo(200, 200) + b"\0" * 40_000_000  # a 40 MB "photo"
    files = [
        ("file", ("holiday.jpg", photo(900, 600), "image/jpeg")),
        ("file", ("huge.jpg", big, "image/jpeg")),
        ("file", ("logo.svg", SVG, "image/svg+xml")),
        ("file", ("locked.pdf", pdf(["secret"], password="pw"), "application/pdf")),
        ("file", ("book.pdf", pdf([f"page {i}" for i in range(2000)]), "application/pdf")),
        ("file", ("broken.pdf", truncated(pdf(["a", "b"]), 0.4), "application/pdf")),
    ]
    async with luna.client() as client:
        resp = await client.post(
            "/api/sessions/page-files/messages", data={"text": "look"}, files=files
        )
    assert resp.status_code == 202, resp.text
    body = resp.json()
    assert [f["name"] for f in body["files"]] == ["holiday.jpg", "logo.svg", "locked.pdf",
                                                  "book.pdf", "broken.pdf"]  # fmt: skip
    assert body["refused"] == ["huge.jpg: too big (the limit is 19.1 MB, attachments.max_bytes)"]
    await wait_until(lambda: bool(llm_server.requests), "the turn's request")
    text = user_text(llm_server.requests[0])
    assert text.startswith("look\n\n[file logo.svg (image/svg+xml, 139 bytes): an SVG drawing is")
    assert "[document locked.pdf (PDF, 1 KB): PDF encrypted with a password: not read]" in text
    assert "read the first 200 of 2,000 pages (attachments.max_pages)]" in text
    assert "[document broken.pdf (PDF, " in text and "): PDF damaged, not read (" in text
    assert "[not taken: huge.jpg: too big" in text


async def test_page_api_takes_ten_of_twenty_images(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    luna = await web_luna()
    llm_server.script(Reply(content="Ten."))
    files = [("file", (f"p{i}.png", photo(30, 20, fmt="PNG", seed=i), "image/png"))
             for i in range(20)]  # fmt: skip
    async with luna.client() as client:
        resp = await client.post("/api/sessions/twenty/messages", data={"text": ""}, files=files)
    assert resp.status_code == 202, resp.text
    assert len(resp.json()["files"]) == 10
    assert resp.json()["refused"] == [
        "10 more files (p10.png, p11.png, p12.png, p13.png, p14.png, …): at most 10 files per "
        "message (attachments.max_per_message)"
    ]
