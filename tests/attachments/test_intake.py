"""The intake: each file taken or refused with one line, the rest of the message kept."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from luna.attachments.intake import Intake, Upload
from luna.config import Config
from tests.fakes.attachments import (
    SVG,
    animated_gif,
    pdf,
    photo,
    png_bomb,
    truncated,
)


def _intake(luna_config: Callable[..., Config], **caps: int) -> Intake:
    return Intake(luna_config({"attachments": caps} if caps else None))


async def test_intake_stores_an_image_and_its_derived_copy(
    luna_config: Callable[..., Config], tmp_path: Path
) -> None:
    intake = _intake(luna_config)
    got = await intake.take_all([Upload("C:\\Users\\me\\IMG_2291.jpg", photo(2000, 1500))])
    (image,) = got.attachments
    assert (image.kind, image.mime, image.name) == ("image", "image/jpeg", "IMG_2291.jpg")
    assert got.blocks == [] and got.refusals == []  # the agent shows an image itself
    assert intake.store.read(image.sha256) == photo(2000, 1500)
    derived = tmp_path / "data" / "attachments" / "derived" / "1024" / image.sha256[:2]
    assert [p.name for p in derived.iterdir()] == [f"{image.sha256}.jpg"]
    mime, data = intake.images.load(image) or ("", b"")
    assert mime == "image/jpeg" and data == derived.joinpath(f"{image.sha256}.jpg").read_bytes()


async def test_intake_refuses_bad_images_with_a_line_each_and_keeps_the_rest(
    luna_config: Callable[..., Config],
) -> None:
    intake = _intake(luna_config, max_bytes=5_000_000)
    uploads = [
        Upload("notes.png", b"just some text, not a picture"),
        Upload("huge.jpg", size=40_000_000, data=None, read=None),
        Upload("bomb.png", png_bomb()),
        Upload("cut.png", truncated(photo(600, 400, fmt="PNG"), 0.3)),
        Upload("anim.gif", animated_gif()),
        Upload("logo.svg", SVG, declared_mime="image/svg+xml"),
    ]
    got = await intake.take_all(uploads, "what do these show?")
    assert [a.name for a in got.attachments] == ["anim.gif", "logo.svg"]
    assert got.refusals == [
        "notes.png: not an image: its bytes are text",
        "huge.jpg: too big (38.1 MB; the limit is 4.8 MB, attachments.max_bytes)",
        "bomb.png: 12000x12000 pixels is over the 89,478,485-pixel limit (a decompression "
        "bomb, or a scan too large to read)",
        got.refusals[3],
    ]
    assert got.refusals[3].startswith("cut.png: the image is damaged and cannot be decoded")
    assert got.blocks == [
        "[file logo.svg (image/svg+xml, 139 bytes): an SVG drawing is not rendered: send it as "
        "a PNG or JPEG for the model to see it]"
    ]
    text = got.message_text("what do these show?")
    assert text.startswith("what do these show?\n\n[file logo.svg")
    assert "[not taken: notes.png: not an image: its bytes are text]" in text


async def test_intake_reads_a_stream_only_up_to_the_cap(luna_config: Callable[..., Config]) -> None:
    intake = _intake(luna_config, max_bytes=100_000)
    asked: list[int] = []

    async def read(limit: int) -> bytes:
        asked.append(limit)
        return b"x" * (limit + 1)  # a sender streaming 40 MB gives no more than this

    got = await intake.take_all([Upload("photo.jpg", read=read)])
    assert asked == [100_000] and not got.attachments
    assert got.refusals == ["photo.jpg: too big (the limit is 98 KB, attachments.max_bytes)"]


async def test_intake_takes_ten_of_twenty_images_and_says_so(
    luna_config: Callable[..., Config],
) -> None:
    intake = _intake(luna_config)
    uploads = [Upload(f"p{i}.png", photo(40, 30, fmt="PNG", seed=i)) for i in range(20)]
    got = await intake.take_all(uploads)
    assert len(got.attachments) == 10 and len({a.sha256 for a in got.attachments}) == 10
    assert got.refusals == [
        "10 more files (p10.png, p11.png, p12.png, p13.png, p14.png, …): at most 10 files per "
        "message (attachments.max_per_message)"
    ]


async def test_intake_daily_cap_holds_across_a_restart(luna_config: Callable[..., Config]) -> None:
    first = _intake(luna_config, max_per_day=3)
    got = await first.take_all([Upload(f"{i}.txt", f"note {i}".encode()) for i in range(2)])
    assert len(got.attachments) == 2
    again = _intake(luna_config, max_per_day=3)  # a new process reads the same count
    got = await again.take_all([Upload(f"{i}.txt", f"more {i}".encode()) for i in range(2)])
    assert len(got.attachments) == 1
    assert got.refusals == ["1.txt: over today's limit of 3 files (attachments.max_per_day)"]


async def test_intake_puts_document_text_in_the_message_within_the_output_limit(
    luna_config: Callable[..., Config],
) -> None:
    intake = _intake(luna_config)
    pages = [f"Chapter {i} about invoices and receipts, line {i}" for i in range(1, 2001)]
    got = await intake.take_all(
        [
            Upload("book.pdf", pdf(pages)),
            Upload("locked.pdf", pdf(["secret"], password="pw")),
            Upload("broken.pdf", b"%PDF-1.7\nno objects"),
            Upload("notes.txt", b"short plain notes"),
        ],
        "summarize the receipts",
    )
    assert [a.kind for a in got.attachments] == ["document"] * 4
    book, locked, broken, notes = got.blocks
    assert book.startswith(
        "[document book.pdf (PDF, 625 KB): PDF, 2000 pages; read the first 200 of 2,000 pages "
        "(attachments.max_pages)]\n"
    )
    assert len(book) < intake.cfg.tools.passthrough_bytes + 1000
    assert "[large output of document-" in book and "Read more with read_file" in book
    assert locked == "[document locked.pdf (PDF, 1 KB): PDF encrypted with a password: not read]"
    assert broken.startswith("[document broken.pdf (PDF, 19 bytes): PDF damaged, not read (")
    assert notes == (
        "[document notes.txt (text, 17 bytes): text]\n"
        '<untrusted source="document_notes.txt">\nshort plain notes\n</untrusted>'
    )


async def test_intake_refuses_with_a_line_when_the_data_folder_cannot_store(
    luna_config: Callable[..., Config],
) -> None:
    intake = _intake(luna_config)
    intake.store.root.parent.mkdir(parents=True, exist_ok=True)
    intake.store.root.write_text("a file where the attachments folder should be")
    got = await intake.take_all([Upload("a.txt", b"words")], "hi")
    assert got.attachments == []
    assert got.refusals == ["a.txt: could not be stored (File exists)"]
