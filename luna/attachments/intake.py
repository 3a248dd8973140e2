"""The one door for files sent with a message: every front-end hands its files to ``Intake``.

A file is taken (stored by content hash, an ``Attachment`` for the message, and the text the
model reads for it) or refused with one short line; a refused file never costs the rest of
the message, and the model is told about it too, so it never answers about a file it lacks.

Invariants:
- Caps from ``[attachments]``: a file over ``max_bytes`` is refused before it is read whole
  (its declared size, or a reader that stops past the cap); files past ``max_per_message`` in
  one message, and past ``max_per_day`` in a day (every sender, counted across restarts in
  ``<data>/attachments/today.json``), are refused.
- The bytes decide (``luna.attachments.sniff``): a file named or declared as an image whose
  bytes are not one is refused; an image is decoded (bomb and damage checks) and its derived
  copy cached before it is stored, so a stored image is always one a model can be shown.
- A document's text goes into the message through the large-output pipeline
  (``luna.tools.output.shape_output``): the same size limit and saved-file reference as a
  large tool result, wrapped as untrusted data as a tool's output is (a PDF from anywhere can
  hold instructions). A document that cannot be read is still kept, with its honest line.
- Nothing blocking on the event loop: hashing, sniffing, decoding and writing run in worker
  threads, conversion in ``luna.attachments.documents``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePath

from luna.attachments.documents import LABELS, convert
from luna.attachments.images import ImageCache, normalize
from luna.attachments.sizes import size_text
from luna.attachments.sniff import sniff
from luna.attachments.store import AttachmentStore, attachments_dir, write_atomic
from luna.config import Config
from luna.config.timezone import zone_for
from luna.errors import AttachmentError
from luna.messages import Attachment
from luna.tools.output import shape_output
from luna.tools.untrusted import wrap_untrusted

log = logging.getLogger(__name__)

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp"})
MAX_NAME = 120
# Reads at most the given number of bytes (more means the file is over the cap).
Reader = Callable[[int], Awaitable[bytes]]


@dataclass(frozen=True)
class Upload:
    """A file as a front-end received it: ``data``, or ``read`` when reading costs."""

    name: str
    data: bytes | None = None
    read: Reader | None = None
    declared_mime: str = ""  # what the sender claimed: a hint for the refusal line only
    size: int | None = None  # what the sender said it is, when it said


@dataclass
class Intaken:
    """What came of one message's files."""

    attachments: list[Attachment] = field(default_factory=list)
    blocks: list[str] = field(default_factory=list)  # what the model reads for the files
    refusals: list[str] = field(default_factory=list)  # one line each, for the user

    def message_text(self, text: str) -> str:
        """The user's text with the files' blocks and the refusals after it."""
        lines = [f"[not taken: {r}]" for r in self.refusals]
        return "\n\n".join(part for part in (text.strip(), *self.blocks, *lines) if part)


def display_name(name: str) -> str:
    """A name to show: its last path part, no control characters, not too long."""
    base = PurePath(name.replace("\\", "/")).name or "file"
    clean = "".join(c if c.isprintable() else "_" for c in base)
    return clean[:MAX_NAME]


class DailyCount:
    """How many files were taken today, kept in a small file so a restart does not reset it."""

    def __init__(self, path: Path, cfg: Config) -> None:
        self.path = path
        self.zone = zone_for(cfg.agent.timezone)
        self._lock = asyncio.Lock()

    def _today(self) -> str:
        return dt.datetime.now(self.zone).date().isoformat()

    def _read(self) -> tuple[str, int]:
        try:
            data = json.loads(self.path.read_text())
            return str(data["day"]), int(data["count"])
        except (OSError, ValueError, KeyError, TypeError):
            return "", 0

    def _take(self, cap: int) -> bool:
        day, count = self._read()
        today = self._today()
        count = count if day == today else 0
        if count >= cap:
            return False
        write_atomic(self.path, json.dumps({"day": today, "count": count + 1}).encode())
        return True

    async def take(self, cap: int) -> bool:
        """Count one more file today; False (nothing counted) when today's cap is reached."""
        async with self._lock:
            return await asyncio.to_thread(self._take, cap)


class Intake:
    """Takes files in for every front-end (one per Luna: it holds the day's count)."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.caps = cfg.attachments
        self.store = AttachmentStore(attachments_dir(cfg.data_dir))
        self.images = ImageCache(self.store, self.caps.image_longest_side)
        self.today = DailyCount(self.store.root / "today.json", cfg)

    async def take_all(self, uploads: Sequence[Upload], text: str = "") -> Intaken:
        """Each of a message's files taken or refused, in order (``text``: the user's words,
        which pick what a long document's excerpt shows)."""
        out = Intaken()
        cap = self.caps.max_per_message
        for upload in uploads[:cap]:
            try:
                attachment, block = await self._take(upload, text)
            except AttachmentError as e:
                out.refusals.append(f"{display_name(upload.name)}: {e}")
                continue
            except OSError as e:  # the data folder could not take it (full, read-only)
                log.exception("attachment %s could not be stored", upload.name)
                why = f"could not be stored ({e.strerror or e})"
                out.refusals.append(f"{display_name(upload.name)}: {why}")
                continue
            out.attachments.append(attachment)
            if block:
                out.blocks.append(block)
        if len(uploads) > cap:
            extra = ", ".join(display_name(u.name) for u in uploads[cap:][:5])
            more = len(uploads) - cap
            out.refusals.append(
                f"{more} more file{'s' if more > 1 else ''} ({extra}{', …' if more > 5 else ''})"
                f": at most {cap} files per message (attachments.max_per_message)"
            )
        if out.refusals:
            log.info("attachments refused: %s", out.refusals)
        return out

    async def _bytes(self, upload: Upload) -> bytes:
        limit = self.caps.max_bytes
        if upload.size is not None and upload.size > limit:
            raise AttachmentError(too_big(upload.size, limit))
        if upload.data is not None:
            data = upload.data
        elif upload.read is not None:
            data = await upload.read(limit)
        else:
            raise AttachmentError("no content")
        if len(data) > limit:  # read up to the cap plus a byte: its true size is unknown
            raise AttachmentError(too_big(len(data) if len(data) > limit + 1 else None, limit))
        if not data:
            raise AttachmentError("the file is empty")
        return data

    async def _take(self, upload: Upload, text: str) -> tuple[Attachment, str]:
        data = await self._bytes(upload)
        name = display_name(upload.name)
        sniffed = await asyncio.to_thread(sniff, data)
        named_image = PurePath(name).suffix.lower() in IMAGE_SUFFIXES
        claims_image = named_image or upload.declared_mime.startswith("image/")
        if claims_image and not sniffed.mime.startswith("image/"):
            raise AttachmentError(f"not an image: its bytes are {_what(sniffed.mime)}")
        made = None
        if sniffed.kind == "image":
            made = await asyncio.to_thread(normalize, data, self.caps.image_longest_side)
        if not await self.today.take(self.caps.max_per_day):
            raise AttachmentError(
                f"over today's limit of {self.caps.max_per_day} files (attachments.max_per_day)"
            )
        sha = await asyncio.to_thread(self.store.write, data)
        attachment = Attachment(sniffed.kind, sniffed.mime, name, len(data), sha)
        head = f"{name} ({sniffed.mime}, {size_text(len(data))}"
        if made is not None:  # the agent shows it (luna.agent.images): no text for it here
            await asyncio.to_thread(self.images.keep, sha, made)
            return attachment, ""
        if sniffed.kind == "document":
            return attachment, await self._document(attachment, data, text)
        why = sniffed.note or f"{sniffed.kind} files are kept but not read"
        return attachment, f"[file {head}): {why}]"

    async def _document(self, attachment: Attachment, data: bytes, text: str) -> str:
        doc = await convert(data, attachment.mime, self.caps.max_pages)
        label = LABELS.get(attachment.mime, attachment.mime)
        head = f"[document {attachment.name} ({label}, {size_text(attachment.size)}): {doc.note}]"
        if not doc.text.strip():
            return head
        shaped = await shape_output(
            doc.text, tool=f"document-{attachment.sha256[:8]}", user_request=text, cfg=self.cfg
        )  # a document's words are data, whoever wrote them: wrapped as a tool's output is
        return f"{head}\n{wrap_untrusted(shaped, f'document {attachment.name}')}"


def too_big(size: int | None, limit: int, key: str = "attachments.max_bytes") -> str:
    """The refusal of a file over ``limit`` (``size`` None: it is unknown how much over)."""
    known = f"{size_text(size)}; " if size is not None else ""
    return f"too big ({known}the limit is {size_text(limit)}, {key})"


def _what(mime: str) -> str:
    if mime.startswith("text/"):
        return "text"
    return {"application/octet-stream": "of no known type"}.get(mime, mime)
