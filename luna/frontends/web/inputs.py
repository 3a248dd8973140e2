"""What a request may carry into Luna, checked once at the door: JSON bodies, ids, numbers.

Job: :func:`json_body` (every handler that reads a body uses it; a webhook reads its bytes
with :func:`capped_body` and checks them with :func:`parse_json`), :func:`path_id` (every id
in a path), :func:`query_int` (every integer in a query string); :class:`ApiError` is how
they, and any handler, refuse a request.

Invariants:
- Nothing a client sends raises past these functions: a body that is not UTF-8 or not JSON,
  nested deeper than ``MAX_JSON_DEPTH`` (``RecursionError`` included), holding a lone
  surrogate anywhere (a string no UTF-8 store or embedding model can take), not an object,
  or slower than ``BODY_TIMEOUT_S`` to arrive, is an ApiError with a 4xx and one line.
- An id is what :func:`luna.ids.parse_id` accepts (the one rule); anything else is a 400.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

from aiohttp import web

from luna.ids import id_rule, parse_id

MAX_JSON_DEPTH = 64
BODY_TIMEOUT_S = 60.0
PARSE_IN_THREAD = 256 * 1024  # bytes of JSON past which parsing leaves the event loop
_INT = re.compile(r"-?[0-9]{1,19}")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


class ApiError(Exception):
    """Raised for a bad request: answered as ``{"error": message}`` with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


def _check(value: Any) -> None:
    """Depth and surrogates, walked without recursion."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                raise ApiError(400, "the body holds a lone surrogate (\\ud800-\\udfff): not text")
        elif isinstance(item, dict | list):
            if depth > MAX_JSON_DEPTH:
                raise ApiError(400, f"the JSON is nested deeper than {MAX_JSON_DEPTH} levels")
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)


async def json_body(request: web.Request) -> dict[str, Any]:
    """The request's JSON object, checked (see the module invariants), or ApiError."""
    try:
        async with asyncio.timeout(BODY_TIMEOUT_S):
            raw = await request.read()
    except TimeoutError:
        raise ApiError(408, f"the body took longer than {BODY_TIMEOUT_S:g} s to arrive") from None
    except web.HTTPRequestEntityTooLarge:
        raise ApiError(413, f"the body is larger than {request.client_max_size:,} bytes") from None
    # A body carrying a file (an image as a data: URL) is megabytes of JSON: parsed and walked
    # in a thread, so the loop goes on serving the others.
    body = (
        await asyncio.to_thread(parse_json, raw) if len(raw) > PARSE_IN_THREAD else parse_json(raw)
    )
    if not isinstance(body, dict):
        raise ApiError(400, "send a JSON object")
    return body


def parse_json(raw: bytes) -> Any:
    """The JSON value in ``raw``, checked (see the module invariants), or ApiError 400."""
    try:
        value = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ApiError(400, "the body is not UTF-8") from None
    except RecursionError:
        raise ApiError(400, f"the JSON is nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError:
        raise ApiError(400, "the body is not valid JSON") from None
    _check(value)
    return value


async def capped_body(request: web.Request, cap: int) -> bytes:
    """The request's body, refused (413) past ``cap`` bytes before more is read: a declared
    length over the cap is refused unread, a chunked body as soon as it passes the cap."""
    if request.content_length is not None and request.content_length > cap:
        raise ApiError(413, f"the body is larger than {cap:,} bytes")
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(BODY_TIMEOUT_S):
            while chunk := await request.content.read(cap + 1 - size):
                size += len(chunk)
                if size > cap:
                    raise ApiError(413, f"the body is larger than {cap:,} bytes")
                chunks.append(chunk)
    except TimeoutError:
        raise ApiError(408, f"the body took longer than {BODY_TIMEOUT_S:g} s to arrive") from None
    return b"".join(chunks)


def path_id(request: web.Request, name: str, what: str) -> int:
    """The id in the path's ``{name}`` (``luna.ids``), or ApiError 400 naming ``what``."""
    value = parse_id(request.match_info[name])
    if value is None:
        raise ApiError(400, id_rule(what))
    return value


def query_int(
    request: web.Request, name: str, default: int | None, low: int, high: int
) -> int | None:
    """The query's integer ``name`` clamped to [low, high]; ``default`` when absent."""
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    if not _INT.fullmatch(raw):
        raise ApiError(400, f"{name} must be an integer")
    return max(low, min(high, int(raw)))
