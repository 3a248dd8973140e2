"""The web front-end's live events: agent events as JSON, a hub that fans them out, and SSE.

Job: :func:`event_json` turns the ``AgentEvent`` s every front-end receives into JSON objects;
:class:`EventHub` hands each published object to every subscriber (the page's open
``/api/events`` streams); :func:`sse_stream` writes one subscription as Server-Sent Events.

Invariants:
- Publishing never waits: a subscriber whose queue is full (a stalled browser tab) is dropped
  and its stream ends; the browser reconnects and resyncs from the session log. A slow client
  can never slow a turn.
- Text is sent as data, never as markup: escaping is the page's job (text nodes, and
  Luna's replies as sanitized Markdown).
- Every stream ends when the hub closes (shutdown), so the HTTP server can stop.
- A stream sends a comment every ``KEEPALIVE_S`` so proxies keep it open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from aiohttp import web

from luna.messages import (
    AgentEvent,
    ReasoningDelta,
    Status,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnDone,
    TurnFailed,
)

QUEUE_MAX = 2000
KEEPALIVE_S = 15.0
_CLOSED: dict[str, Any] = {"type": "_closed"}


def event_json(event: AgentEvent) -> dict[str, Any]:
    """The JSON form of one agent event (``type`` names it)."""
    if isinstance(event, TextDelta):
        return {"type": "text", "text": event.text}
    if isinstance(event, ReasoningDelta):
        return {"type": "reasoning", "text": event.text}
    if isinstance(event, Status):
        return {"type": "status", "text": event.text, "kind": event.kind}
    if isinstance(event, ToolStarted):
        return {
            "type": "tool_started",
            "call_id": event.call_id,
            "name": event.name,
            "arguments": event.arguments,
        }
    if isinstance(event, ToolFinished):
        return {
            "type": "tool_finished",
            "call_id": event.call_id,
            "name": event.name,
            "is_error": event.is_error,
            "duration_s": round(event.duration_s, 3),
            "preview": event.preview,
        }
    if isinstance(event, TurnDone):
        usage = asdict(event.usage) if event.usage is not None else None
        return {
            "type": "done",
            "reply": event.reply,
            "rounds": event.rounds,
            "usage": usage,
            "finish_reason": event.finish_reason,
        }
    if isinstance(event, TurnFailed):
        return {"type": "failed", "message": event.message}
    raise TypeError(f"not an agent event: {event!r}")


class Subscription:
    """One subscriber's queue; iterate it with :meth:`get` until it returns None."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(QUEUE_MAX)
        self.is_dropped = False

    async def get(self, idle_s: float) -> dict[str, Any] | None:
        """The next event, ``{}`` after ``idle_s`` seconds of silence, None once closed."""
        try:
            item = await asyncio.wait_for(self.queue.get(), idle_s)
        except TimeoutError:
            return {}
        return None if item is _CLOSED else item


class EventHub:
    """Fan-out of published events to every current subscriber."""

    def __init__(self) -> None:
        self._subs: set[Subscription] = set()
        self.is_closed = False

    @property
    def subscribers(self) -> int:
        return len(self._subs)

    def subscribe(self) -> Subscription:
        sub = Subscription()
        if self.is_closed:
            sub.queue.put_nowait(_CLOSED)
        else:
            self._subs.add(sub)
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self._subs.discard(sub)

    def publish(self, event: dict[str, Any]) -> None:
        for sub in list(self._subs):
            try:
                sub.queue.put_nowait(event)
            except asyncio.QueueFull:
                self._drop(sub)

    def _drop(self, sub: Subscription) -> None:
        self._subs.discard(sub)
        sub.is_dropped = True
        while not sub.queue.empty():  # make room for the end marker
            sub.queue.get_nowait()
        sub.queue.put_nowait(_CLOSED)

    def close(self) -> None:
        """End every stream (shutdown)."""
        self.is_closed = True
        for sub in list(self._subs):
            self._drop(sub)


def sse_bytes(event: dict[str, Any]) -> bytes:
    """One Server-Sent Event carrying ``event`` as JSON (one ``data:`` line)."""
    return b"data: " + json.dumps(event, ensure_ascii=False).encode() + b"\n\n"


async def sse_stream(
    request: web.Request, hub: EventHub, hello: Callable[[], dict[str, Any]]
) -> web.StreamResponse:
    """Serve the hub as an SSE stream, starting with ``hello()`` (a snapshot taken after
    subscribing, so no event falls between the two)."""
    sub = hub.subscribe()
    first = hello()
    resp = web.StreamResponse(
        headers={"Content-Type": "text/event-stream", "Cache-Control": "no-store"}
    )
    try:
        await resp.prepare(request)
        await resp.write(sse_bytes(first))
        while (item := await sub.get(KEEPALIVE_S)) is not None:
            await resp.write(sse_bytes(item) if item else b": keep-alive\n\n")
    except (ConnectionResetError, ConnectionError):
        pass  # the tab went away
    finally:
        hub.unsubscribe(sub)
    with contextlib.suppress(ConnectionError):
        await resp.write_eof()
    return resp
