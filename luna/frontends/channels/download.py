"""A chat app's file fetched over HTTP (or read from this machine), never more than a cap:
adapters build their ``IncomingFile.read_capped`` on it.

Job: :class:`Downloads` is one app's HTTP client for files, owned by its adapter;
:func:`fetch_capped` GETs one URL the app gave (Discord's CDN, Telegram's file URL) with it and
reads the body in chunks up to ``limit + 1`` bytes; past that it stops and closes the
connection, so a file bigger than the cap costs the cap, never its whole size.
:func:`read_local_capped` does the same for a path on this machine (a local Telegram Bot API
server hands out paths), in a worker thread.

Invariants:
- One client per app, built on the first download in a worker thread (loading the TLS
  context and CA bundle takes tens of milliseconds), kept for every later one (connections
  are reused), and closed by ``aclose`` when the app stops; after that no download starts.
- Errors are the channel layer's: an HTTP error status, a transport failure or a file that
  cannot be read is a ChannelError; the message names neither the URL nor the exception's
  text (a Telegram file URL carries the bot's token, a local path has it as a folder).
- Each network step has a timeout (``CALL_TIMEOUT``); the caller bounds the whole download.
- The URL comes from the app itself, not from a user: it is fetched as given (redirects
  followed), not through ``web_fetch``'s address checks.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from luna.frontends.channels.contract import ChannelError
from luna.frontends.channels.sending import CALL_TIMEOUT
from luna.frontends.uploads import read_head

CHUNK = 256 * 1024


def new_client() -> httpx.AsyncClient:
    """A download client (blocking: it loads the TLS context; call it off the loop)."""
    return httpx.AsyncClient(timeout=CALL_TIMEOUT, follow_redirects=True)


class Downloads:
    """One app's download client (see the module invariants)."""

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None
        self._lock = asyncio.Lock()
        self.is_closed = False

    async def client(self) -> httpx.AsyncClient:
        """The client, built on first use; ChannelError once the app is stopping."""
        async with self._lock:
            if self.is_closed:
                raise ChannelError("the app is stopping: no more downloads")
            if self._client is None:
                self._client = await asyncio.to_thread(new_client)
            return self._client

    async def aclose(self) -> None:
        async with self._lock:
            self.is_closed = True
            client, self._client = self._client, None
        if client is not None:
            await client.aclose()


async def fetch_capped(client: httpx.AsyncClient, url: str, limit: int) -> bytes:
    """The body at ``url``, at most ``limit + 1`` bytes (see the module invariants)."""
    try:
        async with client.stream("GET", url) as resp:
            if resp.status_code >= 400:
                raise ChannelError(
                    f"download answered HTTP {resp.status_code}", status=resp.status_code
                )
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.aiter_bytes(CHUNK):
                chunks.append(chunk)
                size += len(chunk)
                if size > limit:
                    break
            return b"".join(chunks)[: limit + 1]
    except httpx.HTTPError as e:
        raise ChannelError(f"download failed ({type(e).__name__})") from e


async def read_local_capped(path: Path, limit: int) -> bytes:
    """The file at ``path`` on this machine, at most ``limit + 1`` bytes, read off the loop."""
    try:
        return await asyncio.to_thread(read_head, path, limit)
    except OSError as e:
        raise ChannelError(f"reading the file failed ({type(e).__name__})") from e
