"""What an MCP result holds, as Luna hands it on: text for every model, media beside it.

``tools/call`` results and ``resources/read`` contents arrive as the wire's JSON objects; this
module turns them into a :class:`~luna.messages.ToolResult`.

Invariants:
- Every part is represented, never dropped: text as it is; a text resource with its URI; a
  blob whose MIME type is text-like (``text/*``, JSON, XML, YAML, JavaScript, ...) or absent
  and whose bytes are UTF-8 decoded and shown as text; any other blob, image or sound as one
  line (``[image/png, 4 KB]``), which is all a text-only model reads.
- Images and sounds also travel as bytes in ``ToolResult.media`` (the seam a vision model's
  request is built from), each at most ``MAX_MEDIA_BYTES``: image and audio content, and a
  resource blob whose MIME type is ``image/*`` or ``audio/*`` (an SVG is text, shown as
  text); bad base64 is described, not raised.
- A resource link says how to read it: ``read_resource`` with the server's own URI.
- A hostile server's odd shapes are described, not trusted: every field is read as what it
  should be, or shown as missing.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from luna.messages import ToolMedia, ToolResult

MAX_MEDIA_BYTES = 20 * 2**20  # an image or sound larger than this is described only
READ_TOOL = "mcp_read_resource"  # the tool that reads a resource by URI (luna.mcp.resources)
TEXT_LIKE = ("json", "xml", "yaml", "javascript", "ecmascript", "toml", "csv", "x-sh", "sql")


def result_of_call(result: dict[str, Any], server: str) -> ToolResult:
    """A ``tools/call`` result as the model gets it (``isError`` kept)."""
    parts, media = describe_parts(result.get("content"), server)
    structured = result.get("structuredContent")
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False))
    text = "\n".join(parts) if parts else "(no output)"
    return ToolResult(text, is_error=result.get("isError") is True, media=tuple(media))


def result_of_read(result: dict[str, Any], server: str) -> ToolResult:
    """A ``resources/read`` result: each content as an embedded resource would be shown."""
    contents = result.get("contents")
    items = (
        [{"type": "resource", "resource": c} for c in contents if isinstance(c, dict)]
        if (isinstance(contents, list))
        else []
    )
    parts, media = describe_parts(items, server)
    return ToolResult("\n".join(parts) if parts else "(the resource is empty)", media=tuple(media))


def describe_parts(content: Any, server: str) -> tuple[list[str], list[ToolMedia]]:
    """One text part per content item, and the media among them."""
    parts: list[str] = []
    media: list[ToolMedia] = []
    for item in content if isinstance(content, list) else []:
        if not isinstance(item, dict):
            parts.append("[unreadable content]")
            continue
        kind = _field(item, "type")
        if kind == "text":
            parts.append(_field(item, "text"))
        elif kind in ("image", "audio"):
            mime = _field(item, "mimeType") or kind
            data = _decoded(item, "data")
            if data is None:
                parts.append(f"[{mime}, unreadable data]")
                continue
            parts.append(f"[{mime}, {_size(len(data))}]")
            if 0 < len(data) <= MAX_MEDIA_BYTES:
                media.append(ToolMedia("image" if kind == "image" else "audio", mime, data))
        elif kind == "resource_link":
            mime = f", {item['mimeType']}" if _field(item, "mimeType") else ""
            uri = _field(item, "uri")
            parts.append(
                f"[resource link: {_field(item, 'name')} {uri}{mime}; read it with "
                f"{READ_TOOL}(server={server!r}, uri={uri!r})]"
            )
        elif kind == "resource":
            found = item.get("resource")
            res: dict[str, Any] = found if isinstance(found, dict) else {}
            parts.append(_resource(res))
            if (blob := _blob_media(res)) is not None:
                media.append(blob)
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    return parts, media


def _resource(res: dict[str, Any]) -> str:
    uri = _field(res, "uri")
    if isinstance(res.get("text"), str):
        return f"[resource {uri}]\n{res['text']}"
    mime = _field(res, "mimeType")
    data = _decoded(res, "blob")
    if data is None:
        return f"[resource {uri}, {mime or 'application/octet-stream'}, unreadable data]"
    text = as_text(data, mime) if data else None
    if text is not None:
        return f"[resource {uri}, {mime or 'text'}]\n{text}"
    return f"[resource {uri}, {mime or 'application/octet-stream'}, {_size(len(data))}]"


def _blob_media(res: dict[str, Any]) -> ToolMedia | None:
    """An image or sound resource's bytes, for a model that can see (or hear) them."""
    mime = _field(res, "mimeType").lower()
    kind = mime.partition("/")[0]
    if kind not in ("image", "audio") or is_text_like(mime) or "text" in res:
        return None
    data = _decoded(res, "blob")
    if not data or len(data) > MAX_MEDIA_BYTES:
        return None
    return ToolMedia("image" if kind == "image" else "audio", mime, data)


def is_text_like(mime: str) -> bool:
    """A MIME type whose content is text (``text/*``, JSON, XML, YAML, ...)."""
    kind, _, sub = mime.lower().partition(";")[0].strip().partition("/")
    return kind == "text" or any(word in sub for word in TEXT_LIKE)


def as_text(data: bytes, mime: str) -> str | None:
    """A blob's text when its MIME type is text-like, or absent (or octet-stream) and its
    bytes are UTF-8 without NUL; else None."""
    if mime and is_text_like(mime):
        return data.decode("utf-8", "replace")
    if mime and mime.lower() != "application/octet-stream":
        return None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return None if "\x00" in text else text


def _field(item: dict[str, Any], key: str) -> str:
    value = item.get(key)
    return value if isinstance(value, str) else ""


def _decoded(item: dict[str, Any], key: str) -> bytes | None:
    """``item[key]``'s base64 data decoded, or None when it is not base64."""
    try:
        return base64.b64decode(_field(item, key), validate=True)
    except (binascii.Error, ValueError):
        return None


def _size(n: int) -> str:
    return f"{n} bytes" if n < 1024 else f"{n / 1024:.0f} KB"
