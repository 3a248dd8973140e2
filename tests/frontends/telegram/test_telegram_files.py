"""Photos, documents and voice notes on Telegram, through the fake Bot API (getFile, then the
file URL) and the attachments intake: a photo reaches the scripted model as an image part
when it sees and as a line when it does not, a PDF's words are read, a voice note is kept and
the user told it cannot be transcribed; an oversized file is refused without being
downloaded, and a broken download is one line while the bot goes on."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any

from luna.agent.sight import BLIND_NOTICE
from luna.frontends.channels.files import VOICE_NOTICE
from tests.fakes.attachments import pdf, photo
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.telegram_server import FakeTelegram
from tests.frontends.telegram.conftest import OWNER


def user_content(request: dict[str, Any]) -> Any:
    return [m for m in request["messages"] if m["role"] == "user"][-1]["content"]


def text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(p["text"] for p in content if p["type"] == "text")


def stored(running: Any) -> list[tuple[str, str, str]]:
    with sqlite3.connect(running.cfg.memory.db_path) as db:
        return db.execute(
            "SELECT name, kind, mime FROM message_attachments ORDER BY message_id, position"
        ).fetchall()


def photo_sizes(file_id: str, size: int) -> list[dict[str, Any]]:
    """A photo as Telegram sends it: sizes from small to large, the last the largest."""
    thumb = {"file_id": "thumb", "file_unique_id": "t", "width": 90, "height": 68,
             "file_size": 900}  # fmt: skip
    return [thumb, {"file_id": file_id, "file_unique_id": f"u{file_id}", "width": 1280,
                    "height": 960, "file_size": size}]  # fmt: skip


def document(file_id: str, name: str, mime: str, size: int) -> dict[str, Any]:
    return {"file_id": file_id, "file_unique_id": f"u{file_id}", "file_name": name,
            "mime_type": mime, "file_size": size}  # fmt: skip


async def test_telegram_photo_reaches_a_vision_model_as_an_image_part(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    llm_server.vision = True
    luna = await start_luna()
    image = photo(1280, 960)
    file_id = telegram.add_file(image, "photos/file_7.jpg")
    llm_server.script(Reply(content="A gradient."))
    telegram.message(OWNER, extra={"photo": photo_sizes(file_id, len(image)),
                                   "caption": "what is this?"})  # fmt: skip
    await telegram.wait_for(lambda: telegram.shown(OWNER) == ["A gradient."])
    content = user_content(llm_server.requests[0])
    parts = [p for p in content if p["type"] == "image_url"]
    assert len(parts) == 1 and parts[0]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert text_of(content).startswith("what is this?")
    assert [c["file_id"] for c in telegram.called("getFile")] == [file_id]  # the largest only
    assert stored(luna) == [("photo.jpg", "image", "image/jpeg")]


async def test_telegram_document_photo_and_voice_reach_a_text_only_model(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    luna = await start_luna()
    invoice = pdf(["Invoice total 42.50 EUR"])
    image = photo(320, 240)
    voice = b"OggS\x00\x02" + bytes(200)
    ids = [telegram.add_file(invoice, "documents/file_1.pdf"),
           telegram.add_file(image, "photos/file_2.jpg"),
           telegram.add_file(voice, "voice/file_3.oga")]  # fmt: skip
    llm_server.script(Reply(content="42.50 EUR."), Reply(content="I cannot see it."),
                      Reply(content="Please type it."))  # fmt: skip
    pdf_doc = document(ids[0], "invoice.pdf", "application/pdf", len(invoice))
    telegram.message(OWNER, extra={"document": pdf_doc, "caption": "what do I owe?"})
    await telegram.wait_for(lambda: telegram.shown(OWNER) == ["42.50 EUR."])
    text = user_content(llm_server.requests[0])
    assert text.startswith("what do I owe?")
    assert "[document invoice.pdf (PDF" in text and "Invoice total 42.50 EUR" in text

    telegram.message(OWNER, extra={"photo": photo_sizes(ids[1], len(image))})
    await telegram.wait_for(lambda: any(BLIND_NOTICE in t for t in telegram.shown(OWNER)))
    content = user_content(llm_server.requests[1])
    assert isinstance(content, str)  # no image part: this server would answer 500
    assert "[image photo.jpg (image/jpeg" in content and "cannot see images]" in content

    note = {"file_id": ids[2], "file_unique_id": "u3", "duration": 2, "mime_type": "audio/ogg",
            "file_size": len(voice)}  # fmt: skip
    telegram.message(OWNER, extra={"voice": note})
    await telegram.wait_for(lambda: "Please type it." in telegram.shown(OWNER))
    assert telegram.shown(OWNER).count(VOICE_NOTICE) == 1
    assert "[file voice.ogg (audio/ogg" in user_content(llm_server.requests[2])
    assert [kind for _, kind, _ in stored(luna)] == ["document", "image", "audio"]


async def test_telegram_oversized_files_are_refused_without_a_whole_download(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    await start_luna({"burst_window": 1.0}, attachments={"max_bytes": 1_000_000})
    big = telegram.add_file(b"\0" * 100, "documents/file_1.bin")  # announced as 15 MB
    liar = telegram.add_file(b"A" * 3_000_000, "documents/file_2.txt")  # announced as 100
    llm_server.script(Reply(content="Too big, sorry."))
    # An album: two messages in one burst, so one turn with both files.
    telegram.message(
        OWNER,
        extra={
            "media_group_id": "g1",
            "caption": "two files",
            "document": document(big, "video.mp4", "video/mp4", 15_000_000),
        },
    )
    telegram.message(OWNER, extra={"media_group_id": "g1",
                     "document": document(liar, "log.txt", "text/plain", 100)})  # fmt: skip
    await telegram.wait_for(lambda: "Too big, sorry." in telegram.shown(OWNER))
    assert len(llm_server.requests) == 1
    assert [c["file_id"] for c in telegram.called("getFile")] == [liar]  # not the announced one
    text = user_content(llm_server.requests[0])
    assert "[not taken: video.mp4: too big (14.3 MB; the limit is 977 KB" in text
    assert "[not taken: log.txt: too big (the limit is 977 KB, attachments.max_bytes)]" in text
    notices = [t for t in telegram.shown(OWNER) if t.startswith("Not taken")]
    assert len(notices) == 1 and "video.mp4" in notices[0] and "log.txt" in notices[0]


async def test_telegram_broken_download_is_one_line_and_the_bot_goes_on(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    luna = await start_luna()
    gone = telegram.add_file(b"%PDF-1.4 ...", "documents/file_1.pdf")
    telegram.fault("getFile", status=400, description="Bad Request: wrong file_id")
    llm_server.script(Reply(content="It did not come through."), Reply(content="Hello."))
    telegram.message(
        OWNER, "read this", extra={"document": document(gone, "a.pdf", "application/pdf", 12)}
    )
    await telegram.wait_for(lambda: "It did not come through." in telegram.shown(OWNER))
    text = user_content(llm_server.requests[0])
    assert "[not taken: a.pdf: could not be downloaded from telegram]" in text
    telegram.message(OWNER, "still there?")
    await telegram.wait_for(lambda: "Hello." in telegram.shown(OWNER))
    assert user_content(llm_server.requests[1]).startswith("still there?")
    assert stored(luna) == []
