"""The channel layer's files as intake uploads, through the real Intake: the smaller cap wins
and is named, an announced size over it is never downloaded, an adapter without a capped
reader is judged after its read, and a download that hangs is one line."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from luna.attachments.intake import Intake
from luna.config import Config
from luna.frontends.channels import files
from luna.frontends.channels.contract import ChannelError, IncomingFile
from luna.frontends.channels.files import uploads_of
from tests.fakes.attachments import pdf


def incoming(
    name: str, data: bytes, size: int, reads: list[str], *, capped: bool = True
) -> IncomingFile:
    """A file as an adapter hands it over; ``reads`` records each download asked for."""

    async def read() -> bytes:
        reads.append(f"{name}: whole")
        return data

    async def read_capped(limit: int) -> bytes:
        reads.append(f"{name}: {limit}")
        return data[: limit + 1]

    return IncomingFile(name, size, None, read, read_capped=read_capped if capped else None)


async def test_channel_files_smaller_cap_wins_and_oversized_files_are_not_read(
    luna_config: Callable[..., Config],
) -> None:
    intake = Intake(luna_config({"attachments": {"max_bytes": 50_000}}))
    reads: list[str] = []
    doc = pdf(["Invoice total 42.50 EUR"])
    sent = [
        incoming("invoice.pdf", doc, len(doc), reads),
        incoming("huge.bin", b"x" * 20_000, 9_000_000, reads),  # announced: over both caps
        incoming("quiet.txt", b"y" * 20_000, 0, reads),  # no size announced, over the app's
        incoming("old.txt", b"z" * 30_000, 0, reads, capped=False),  # an adapter without
    ]
    got = await intake.take_all(uploads_of(sent, "discord", 10_000), "what do I owe?")
    assert [a.name for a in got.attachments] == ["invoice.pdf"]
    assert "Invoice total 42.50 EUR" in got.message_text("what do I owe?")
    assert got.refusals == [
        "huge.bin: too big (8.6 MB; the limit is 49 KB, attachments.max_bytes)",
        "quiet.txt: too big (the limit is 10 KB, discord.max_attachment_bytes)",
        "old.txt: too big (29 KB; the limit is 10 KB, discord.max_attachment_bytes)",
    ]
    assert reads == ["invoice.pdf: 10000", "quiet.txt: 10000", "old.txt: whole"]


async def test_channel_files_failed_and_hung_downloads_are_one_line_each(
    luna_config: Callable[..., Config],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setattr(files, "DOWNLOAD_TIMEOUT", 0.2)
    intake = Intake(luna_config())

    async def refused(limit: int) -> bytes:
        raise ChannelError("Telegram 400", status=400)

    async def hangs(limit: int) -> bytes:
        await asyncio.sleep(60)
        return b""

    async def never() -> bytes:
        raise AssertionError("read whole")

    sent = [IncomingFile("a.pdf", 10, None, never, read_capped=refused),
            IncomingFile("b.jpg", 10, "image/jpeg", never, "photo", read_capped=hangs)]  # fmt: skip
    got = await intake.take_all(uploads_of(sent, "telegram", 20_000_000), "")
    assert got.attachments == []
    assert got.refusals == ["a.pdf: could not be downloaded from telegram",
                            "b.jpg: could not be downloaded from telegram"]  # fmt: skip
    logged = [r.getMessage() for r in caplog.records if r.name == files.__name__]
    assert logged == [
        "telegram: a.pdf could not be downloaded: Telegram 400",
        "telegram: b.jpg could not be downloaded: no answer within 0.2 s",  # not an empty reason
    ]
