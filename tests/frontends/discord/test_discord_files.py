"""Files sent on Discord through the real bot (dpytest), the channel layer and the attachments
intake, downloaded from a loopback stand-in for Discord's CDN (the ``cdn`` fixture): a
photo reaches the scripted model as an image part when it sees and as a line when it does
not; a PDF's and a text file's words are read; an oversized file is refused without being
downloaded whole; a broken download is one line and the bot goes on."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

import discord
import discord.ext.test as dpytest
from discord.ext.test import backend, factories

from luna.agent.sight import BLIND_NOTICE
from tests.fakes.attachments import pdf, photo
from tests.fakes.file_host import FileHost
from tests.fakes.llm_server import FakeLLMServer, Reply

MB = 1024 * 1024


async def send(h: Any, text: str, files: list[tuple[str, str, int, str | None]]) -> None:
    """The owner sends ``text`` in a DM with attachments (name, url, announced size, type),
    as Discord's gateway hands them to the bot."""
    dm = await h.dm_channel(h.owner)
    state = backend.get_state()
    attachments = [
        discord.Attachment(
            data=factories.make_attachment_dict(name, size, url, url, content_type=mime),
            state=state,
        )
        for name, url, size, mime in files
    ]
    backend.make_message(text, h.owner, dm, attachments=attachments)
    await dpytest.run_all_events()


def user_content(request: dict[str, Any]) -> Any:
    return [m for m in request["messages"] if m["role"] == "user"][-1]["content"]


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content if p["type"] == "text")


def stored(h: Any) -> list[tuple[str, str, str]]:
    with sqlite3.connect(h.cfg.memory.db_path) as db:
        return db.execute(
            "SELECT name, kind, mime FROM message_attachments ORDER BY message_id, position"
        ).fetchall()


async def test_discord_photo_reaches_a_vision_model_as_an_image_part(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer, cdn: FileHost
) -> None:
    llm_server.vision = True
    h = await make_harness()
    llm_server.script(Reply(content="A gradient."))
    image = photo(1600, 1200)
    url = cdn.add("IMG_2291.jpg", image)
    await send(h, "what is this?", [("IMG_2291.jpg", url, len(image), "image/jpeg")])
    await h.settle()
    content = user_content(llm_server.requests[0])
    parts = [p for p in content if p["type"] == "image_url"]
    assert len(parts) == 1 and parts[0]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert "what is this?" in text_of(content) and "not a text file" not in text_of(content)
    assert stored(h) == [("IMG_2291.jpg", "image", "image/jpeg")]
    assert cdn.files["IMG_2291.jpg"].requests == 1


async def test_discord_photo_to_a_text_only_model_is_one_line(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer, cdn: FileHost
) -> None:
    h = await make_harness()
    llm_server.script(Reply(content="I cannot see it."))
    image = photo(320, 240)
    url = cdn.add("cat.jpg", image)
    await send(h, "look", [("cat.jpg", url, len(image), "image/jpeg")])
    await h.settle()
    content = user_content(llm_server.requests[0])
    assert isinstance(content, str)  # no image part: this server would answer 500
    assert "[image cat.jpg (image/jpeg" in content and "cannot see images]" in content
    dm = await h.dm_channel(h.owner)
    assert any(BLIND_NOTICE in m["content"] for m in h.bot_messages(dm))


async def test_discord_pdf_and_text_file_are_read_into_the_message(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer, cdn: FileHost
) -> None:
    h = await make_harness()
    llm_server.script(Reply(content="42.50 EUR, and milk."))
    invoice = pdf(["Invoice total 42.50 EUR"])
    notes = b"buy milk\ncall mum\n"
    await send(h, "what do I owe?", [
        ("invoice.pdf", cdn.add("invoice.pdf", invoice), len(invoice), "application/pdf"),
        ("notes.txt", cdn.add("notes.txt", notes), len(notes), "text/plain; charset=utf-8"),
    ])  # fmt: skip
    await h.settle()
    text = text_of(user_content(llm_server.requests[0]))
    assert text.startswith("what do I owe?")
    assert "[document invoice.pdf (PDF" in text and "Invoice total 42.50 EUR" in text
    assert "buy milk\ncall mum" in text
    assert [kind for _, kind, _ in stored(h)] == ["document", "document"]


async def test_discord_oversized_files_are_refused_without_a_whole_download(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer, cdn: FileHost
) -> None:
    h = await make_harness(attachments={"max_bytes": 1_000_000})
    llm_server.script(Reply(content="Too big, sorry."))
    announced = cdn.add_endless("video.mp4", 40 * MB)
    unannounced = cdn.add_endless("dump.bin", 64 * MB)  # Discord said nothing of its size
    await send(h, "two files", [
        ("video.mp4", announced, 40 * MB, "video/mp4"),
        ("dump.bin", unannounced, 0, None),
    ])  # fmt: skip
    await h.settle()
    assert cdn.files["video.mp4"].requests == 0  # refused on the size Discord announced
    assert cdn.files["dump.bin"].sent < 16 * MB  # the read stopped past the cap
    text = text_of(user_content(llm_server.requests[0]))
    assert "[not taken: video.mp4: too big (40.0 MB; the limit is 977 KB" in text
    assert "[not taken: dump.bin: too big (the limit is 977 KB, attachments.max_bytes)]" in text
    dm = await h.dm_channel(h.owner)
    notices = [m["content"] for m in h.bot_messages(dm) if m["content"].startswith("Not taken")]
    assert len(notices) == 1 and "video.mp4" in notices[0] and "dump.bin" in notices[0]
    assert stored(h) == []


async def test_discord_broken_downloads_are_one_line_and_the_bot_goes_on(
    make_harness: Callable[..., Any], llm_server: FakeLLMServer, cdn: FileHost
) -> None:
    h = await make_harness()
    llm_server.script(Reply(content="Those did not come through."), Reply(content="Hello."))
    await send(h, "files", [
        ("a.png", cdn.add_broken("a.png", 500), 300, "image/png"),
        ("b.pdf", cdn.add_broken("b.pdf", None), 300_000, "application/pdf"),
    ])  # fmt: skip
    await h.settle()
    text = text_of(user_content(llm_server.requests[0]))
    assert "[not taken: a.png: could not be downloaded from discord]" in text
    assert "[not taken: b.pdf: could not be downloaded from discord]" in text
    await send(h, "still there?", [])
    await h.settle()
    assert text_of(user_content(llm_server.requests[1])).startswith("still there?")
    dm = await h.dm_channel(h.owner)
    assert "Hello." in [m["content"] for m in h.bot_messages(dm)]
