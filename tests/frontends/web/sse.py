"""Reading the web front-end's ``/api/events`` stream in tests, as a browser's EventSource would."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx


class EventReader:
    """Collects the JSON events of one open SSE stream in the background."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self._new = asyncio.Event()

    async def _pump(self, response: httpx.Response) -> None:
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                self.events.append(json.loads(line[6:]))
                self._new.set()

    async def wait_for(
        self, predicate: Callable[[dict[str, Any]], bool], within_s: float = 20.0
    ) -> dict[str, Any]:
        """The first event (seen so far or later) matching ``predicate``."""
        async with asyncio.timeout(within_s):
            seen = 0
            while True:
                for event in self.events[seen:]:
                    if predicate(event):
                        return event
                seen = len(self.events)
                self._new.clear()
                await self._new.wait()

    def of(self, turn_id: str) -> list[dict[str, Any]]:
        return [e for e in self.events if e.get("turn_id") == turn_id]


@contextlib.asynccontextmanager
async def event_stream(client: httpx.AsyncClient) -> AsyncIterator[EventReader]:
    reader = EventReader()
    async with client.stream("GET", "/api/events", timeout=None) as response:
        assert response.status_code == 200, response.status_code
        assert response.headers["content-type"].startswith("text/event-stream")
        task = asyncio.create_task(reader._pump(response))
        try:
            await reader.wait_for(lambda e: e["type"] == "hello")
            yield reader
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await task
