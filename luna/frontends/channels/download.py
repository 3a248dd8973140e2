"""A chat app's file fetched over HTTP, never more than a cap: adapters build their
``IncomingFile.read_capped`` on it.

Job: :func:`fetch_capped` GETs one URL an app gave (Discord's CDN, Telegram's file URL) and
reads its body in chunks up to ``limit + 1`` bytes; past that it stops and closes the
connection, so a file bigger than the cap costs the cap, never its whole size.

Invariants:
- Errors are the channel layer's: an HTTP error status or a transport failure is a
  ChannelError; the message names neither the URL nor the exception's text (a Telegram file
  URL carries the bot's token).
- Each network step has a timeout (``CALL_TIMEOUT``); the caller bounds the whole download.
- The URL comes from the app itself, not from a user: it is fetched as given (redirects
  followed), not through ``web_fetch``'s address checks.
"""

from __future__ import annotations

import httpx

from luna.frontends.channels.contract import ChannelError
from luna.frontends.channels.sending import CALL_TIMEOUT

CHUNK = 256 * 1024


async def fetch_capped(url: str, limit: int) -> bytes:
    """The body at ``url``, at most ``limit + 1`` bytes (see the module invariants)."""
    try:
        async with (
            httpx.AsyncClient(timeout=CALL_TIMEOUT, follow_redirects=True) as client,
            client.stream("GET", url) as resp,
        ):
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
