"""An httpx transport that makes every streamed response valid UTF-8.

Why: a server (or a proxy) that emits invalid UTF-8 in an SSE stream would otherwise make the
OpenAI SDK's decoder raise mid-reply and lose the whole answer. Here each undecodable byte
becomes U+FFFD, visibly, and the rest of the reply arrives as sent.

Invariants: valid UTF-8 passes through byte for byte; decoding is incremental, so a character
split across two network reads is never mangled. Every transport of the process verifies TLS
with one shared context (:func:`shared_tls`): building one loads the CA bundle, 30-40 ms.
"""

from __future__ import annotations

import codecs
import functools
import ssl
from collections.abc import AsyncIterator

import httpx


@functools.cache
def shared_tls() -> ssl.SSLContext:
    """httpx's default verifying context (certifi's CAs, or SSL_CERT_FILE/SSL_CERT_DIR), made
    once: an SSLContext is safe to share between connections, clients and threads."""
    return httpx.create_ssl_context()


class _RepairedStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream) -> None:
        self._inner = inner

    async def __aiter__(self) -> AsyncIterator[bytes]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        async for chunk in self._inner:
            text = decoder.decode(chunk)
            if text:
                yield text.encode("utf-8")
        tail = decoder.decode(b"", final=True)
        if tail:
            yield tail.encode("utf-8")

    async def aclose(self) -> None:
        await self._inner.aclose()


class Utf8RepairingTransport(httpx.AsyncHTTPTransport):
    """``httpx.AsyncHTTPTransport`` whose event-stream bodies are always valid UTF-8, verifying
    TLS with :func:`shared_tls`."""

    def __init__(self) -> None:
        super().__init__(verify=shared_tls())

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        is_events = "text/event-stream" in response.headers.get("content-type", "")
        if is_events and isinstance(response.stream, httpx.AsyncByteStream):
            response.stream = _RepairedStream(response.stream)
        return response
