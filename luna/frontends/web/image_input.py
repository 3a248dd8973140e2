"""Images in an OpenAI client's message: ``image_url`` parts into the attachment store.

Invariants:
- Only ``data:<type>;base64,<bytes>`` URLs are taken; the bytes are sniffed and normalized by
  ``luna.attachments`` (the declared type is never trusted). An ``http(s)`` address is refused
  for now (Luna does not fetch it; the client can send the bytes), as is any other scheme.
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
from luna.messages import Attachment

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


def _store(store: AttachmentStore, urls: list[str]) -> tuple[Attachment, ...]:
    kept = []
    for n, url in enumerate(urls, 1):
        data = _decode(url, n)
        try:
            ext = (sniff_mime(data) or "image/unknown").partition("/")[2]
            kept.append(store.put(data, f"image-{n}.{ext}"))
        except AttachmentRefusedError as e:
            raise ImageInputError(str(e)) from e
    return tuple(kept)


async def stored_images(store: AttachmentStore | None, content: Any) -> tuple[Attachment, ...]:
    """The attachments of a message's ``image_url`` parts, stored; ImageInputError if not."""
    urls = image_urls(content)
    if not urls:
        return ()
    if store is None:
        raise ImageInputError("this Luna does not take images")
    if len(urls) > MAX_IMAGES:
        raise ImageInputError(f"at most {MAX_IMAGES} images per message")
    for n, url in enumerate(urls, 1):
        scheme = url.partition(":")[0].lower()
        if scheme in ("http", "https"):
            raise ImageInputError(
                f"image {n} is an {scheme} address; Luna does not fetch images yet: send the "
                "bytes as a data: URL (data:image/png;base64,…)"
            )
        if scheme != "data":
            raise ImageInputError(f"image {n}: only data: URLs are taken")
    return await asyncio.to_thread(_store, store, urls)
