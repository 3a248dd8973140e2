"""Photos, documents and voice notes on Telegram: downloaded through getFile and the file URL
only when read, handed to the model as text (until the attachments intake lands)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from luna.frontends.channels.files import VOICE_NOTICE
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.telegram_server import FakeTelegram
from tests.frontends.telegram.conftest import OWNER


def last_user_text(llm_server: FakeLLMServer) -> str:
    return [m["content"] for m in llm_server.requests[-1]["messages"] if m["role"] == "user"][-1]


async def test_telegram_document_photo_and_voice_reach_the_model(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    await start_luna()
    notes = telegram.add_file(b"shopping: milk, eggs\n", "documents/notes.txt")
    photo = telegram.add_file(b"\xff\xd8\xff\xe0 not really a jpeg", "photos/p.jpg")
    voice = telegram.add_file(b"OggS...", "voice/v.oga")
    llm_server.script(Reply(content="Milk and eggs."), Reply(content="Nice picture."),
                      Reply(content="Please type it."))  # fmt: skip
    document = {"file_id": notes, "file_unique_id": "u1", "file_name": "notes.txt",
                "mime_type": "text/plain", "file_size": 21}  # fmt: skip
    telegram.message(OWNER, extra={"document": document, "caption": "what do I need?"})
    await telegram.wait_for(lambda: telegram.shown(OWNER) == ["Milk and eggs."])
    text = last_user_text(llm_server)
    assert text.startswith("what do I need?")
    assert "[attachment notes.txt]" in text and "shopping: milk, eggs" in text
    assert telegram.called("getFile")[0]["file_id"] == notes

    sizes = [{"file_id": photo, "file_unique_id": "u2", "width": 90, "height": 90,
              "file_size": 24}]  # fmt: skip
    telegram.message(OWNER, extra={"photo": sizes})
    await telegram.wait_for(lambda: "Nice picture." in telegram.shown(OWNER))
    assert "[attachment photo.jpg: not a text file, not read]" in last_user_text(llm_server)

    note = {"file_id": voice, "file_unique_id": "u3", "duration": 2, "mime_type": "audio/ogg",
            "file_size": 7}  # fmt: skip
    telegram.message(OWNER, extra={"voice": note})
    await telegram.wait_for(lambda: "Please type it." in telegram.shown(OWNER))
    assert VOICE_NOTICE in telegram.shown(OWNER)
    assert "[voice note voice.ogg: cannot be transcribed yet" in last_user_text(llm_server)
    assert len(telegram.called("getFile")) == 1  # only the text file was downloaded
