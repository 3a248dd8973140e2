"""Files that come to the web front-end, made into intake uploads: image URLs and form parts.

Invariants:
- An ``http(s)`` image URL is fetched only through ``luna.tools.builtin.web.fetch_bytes``, the
  SSRF-guarded GET of ``web_fetch`` (loopback, private, link-local and metadata addresses
  refused unless in ``tools.fetch_allow_hosts``), and only when the intake reads it.
- A ``data:`` URL's size is judged from its base64 length before it is decoded.
- A form's file parts are read in chunks up to the cap plus one byte; a part past
  ``attachments.max_per_message`` is not read at all (the intake names it, refused).
- Every failure is an AttachmentError, which the intake turns into the file's refusal line.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from pathlib import PurePosixPath
from urllib.parse import unquote, urlsplit

from aiohttp import BodyPartReader, MultipartReader

from luna.attachments.intake import Upload
from luna.config import Config
from luna.errors import AttachmentError, ToolError
from luna.tools.builtin.web import fetch_bytes

MAX_TEXT_BYTES = 1_000_000  # a form's text field (the turn runner refuses past its own limit)


def _suffix(mime: str) -> str:
    sub = mime.partition("/")[2].split("+")[0]
    return f".{'jpg' if sub == 'jpeg' else sub}" if sub else ""


def image_url_upload(cfg: Config, url: str, number: int) -> Upload:
    """The image at ``url`` (an OpenAI ``image_url``) as an upload, read when taken."""
    if url.startswith("data:"):
        return _data_upload(url, number)
    path = PurePosixPath(unquote(urlsplit(url).path)).name

    async def read(limit: int) -> bytes:
        try:
            got = await fetch_bytes(cfg, url, limit + 1)
        except ToolError as e:
            raise AttachmentError(f"not fetched: {e}") from None
        except TimeoutError:
            raise AttachmentError(
                f"not fetched: took longer than {cfg.tools.fetch_timeout:g} s"
            ) from None
        if got.status >= 400:
            raise AttachmentError(f"not fetched: {got.url} answered HTTP {got.status}")
        return got.body

    return Upload(path or f"image-{number}", read=read)


def _data_upload(url: str, number: int) -> Upload:
    header, comma, payload = url[5:].partition(",")
    mime, *params = header.split(";")
    is_base64 = bool(comma) and "base64" in params and "/" in mime

    async def read(limit: int) -> bytes:
        if not is_base64:
            raise AttachmentError("not a base64 data: URL (data:TYPE;base64,...)")
        if len(payload) * 3 // 4 > limit + 3:
            return b"\0" * (limit + 1)  # over the cap, judged without decoding it
        try:  # megabytes of base64: decoded off the event loop
            return await asyncio.to_thread(base64.b64decode, payload, validate=True)
        except (binascii.Error, ValueError):
            raise AttachmentError("the data: URL is not valid base64") from None

    return Upload(f"image-{number}{_suffix(mime)}", read=read, declared_mime=mime)


async def _read_part(part: BodyPartReader, limit: int) -> bytes:
    chunks, size = [], 0
    while size <= limit:
        chunk = await part.read_chunk(256 * 1024)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)[: limit + 1]


async def form_uploads(reader: MultipartReader, cfg: Config) -> tuple[str, list[Upload]]:
    """(text, uploads) of a ``multipart/form-data`` message: a ``text`` field and ``file``
    parts, in the order sent."""
    text = ""
    uploads: list[Upload] = []
    cap = cfg.attachments.max_bytes
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            raise AttachmentError("nested multipart bodies are not taken")
        if part.name == "text":
            raw = await _read_part(part, MAX_TEXT_BYTES)
            text = raw[:MAX_TEXT_BYTES].decode("utf-8", "replace")
        elif part.name == "file":
            name = part.filename or f"file-{len(uploads) + 1}"
            declared = part.headers.get("Content-Type", "")
            if len(uploads) >= cfg.attachments.max_per_message:
                uploads.append(Upload(name, data=b"", declared_mime=declared))
                continue
            uploads.append(Upload(name, data=await _read_part(part, cap), declared_mime=declared))
    return text, uploads
