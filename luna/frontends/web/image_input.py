"""Images in an OpenAI client's message: ``image_url`` parts into the attachment store.

Invariants:
- ``data:<type>;base64,<bytes>`` URLs, and ``http(s)`` addresses fetched through
  ``web_fetch``'s SSRF guard (``luna.tools.builtin.web.fetch_raw``: non-public addresses
  refused unless in ``tools.fetch_allow_hosts``, every redirect checked, the body capped at
  ``attachments.max_file_mb``, ``tools.fetch_timeout``); any other scheme is refused. The
  bytes are sniffed and normalized by ``luna.attachments`` (a declared type is never trusted).
- Every refusal is an ``ImageInputError`` whose text names the part and says why (HTTP 400);
  nothing of a refused request is stored beyond images already kept by content hash.
- Decoding, sniffing and storing run in a worker thread.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
from typing import Any

from luna.attachments import AttachmentRefusedError, AttachmentStore, sniff_mime
from luna.config import Config
from luna.errors import ToolError
from luna.messages import Attachment
from luna.tools.builtin.web import fetch_raw

MAX_IMAGES = 8  # per message


class ImageInputError(ValueError):
    """An ``image_url`` part that cannot be used; the message says why (HTTP 400)."""


def image_urls(content: Any) -> list[str]:
    """The URLs of a message's ``image_url`` parts, in order."""
    if not isinstance(content, list):
        return []
    urls = []
    for i, part in enumerate(content):
        if isinstance(part, dict) and part.get("type") == "image_url":
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            if not isinstance(url, str):
                raise ImageInputError(f"content[{i}].image_url.url must be a string")
            urls.append(url)
    return urls


def _decode(url: str, n: int) -> bytes:
    head, comma, payload = url.partition(",")
    if not comma or not head.endswith(";base64"):
        raise ImageInputError(f"image {n} is not a base64 data: URL (data:image/png;base64,…)")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as e:
        raise ImageInputError(f"image {n}: its base64 data is not valid") from e


async def _fetch(cfg: Config, store: AttachmentStore, url: str, n: int) -> bytes:
    try:
        got = await fetch_raw(cfg, url, store.max_bytes + 1)
    except ToolError as e:
        raise ImageInputError(f"image {n}: {e}") from e
    if got.status >= 400:
        raise ImageInputError(f"image {n}: {url} answered HTTP {got.status}")
    return got.body  # over the cap: put refuses it as too large


def _store(store: AttachmentStore, images: list[bytes]) -> tuple[Attachment, ...]:
    kept = []
    for n, data in enumerate(images, 1):
        try:
            ext = (sniff_mime(data) or "image/unknown").partition("/")[2]
            kept.append(store.put(data, f"image-{n}.{ext}"))
        except AttachmentRefusedError as e:
            raise ImageInputError(str(e)) from e
    return tuple(kept)


async def stored_images(
    cfg: Config, store: AttachmentStore | None, content: Any
) -> tuple[Attachment, ...]:
    """The attachments of a message's ``image_url`` parts, stored; ImageInputError if not."""
    urls = image_urls(content)
    if not urls:
        return ()
    if store is None:
        raise ImageInputError("this Luna does not take images")
    if len(urls) > MAX_IMAGES:
        raise ImageInputError(f"at most {MAX_IMAGES} images per message")
    schemes = [url.partition(":")[0].lower() for url in urls]
    for n, scheme in enumerate(schemes, 1):
        if scheme not in ("data", "http", "https"):
            raise ImageInputError(f"image {n}: only data: and http(s) URLs are taken")
    images = []
    for n, (url, scheme) in enumerate(zip(urls, schemes, strict=True), 1):
        if scheme == "data":
            images.append(await asyncio.to_thread(_decode, url, n))
        else:
            images.append(await _fetch(cfg, store, url, n))
    return await asyncio.to_thread(_store, store, images)
