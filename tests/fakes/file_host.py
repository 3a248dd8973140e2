"""A loopback file host standing in for a chat app's CDN (Discord's ``cdn.discordapp.com``).

``FileHost`` serves files over real HTTP on ``127.0.0.1:0`` in the test's event loop, and
counts what it sends, so a test can check that a file over a cap was not downloaded whole:
- ``add(name, data)`` serves bytes; ``add_endless(name, total)`` streams ``total`` bytes in
  chunks, made as they are sent, until the client stops reading;
- ``add_broken(name, status=...)`` answers an HTTP error; ``status=None`` sends the headers
  and a first chunk, then drops the connection (a download cut off).
"""

from __future__ import annotations

from dataclasses import dataclass

from aiohttp import web

CHUNK = 64 * 1024


@dataclass
class Served:
    data: bytes = b""
    total: int = 0  # for an endless file: the size it claims
    status: int | None = 200  # None: the connection drops after the first chunk
    sent: int = 0  # bytes written to the client
    requests: int = 0


class FileHost:
    def __init__(self) -> None:
        self.files: dict[str, Served] = {}
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> FileHost:
        app = web.Application()
        app.router.add_get("/attachments/{name}", self._get)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    def add(self, name: str, data: bytes) -> str:
        self.files[name] = Served(data=data, total=len(data))
        return f"{self.url}/attachments/{name}"

    def add_endless(self, name: str, total: int) -> str:
        self.files[name] = Served(total=total)
        return f"{self.url}/attachments/{name}"

    def add_broken(self, name: str, status: int | None = 500) -> str:
        self.files[name] = Served(data=b"x" * CHUNK * 4, status=status)
        return f"{self.url}/attachments/{name}"

    async def _get(self, request: web.Request) -> web.StreamResponse:
        served = self.files.get(request.match_info["name"])
        if served is None:
            raise web.HTTPNotFound()
        served.requests += 1
        if served.status is not None and served.status >= 400:
            return web.Response(status=served.status, text="broken")
        size = served.total or len(served.data)
        resp = web.StreamResponse(headers={"Content-Length": str(size)})
        await resp.prepare(request)
        while served.sent < size:
            chunk = served.data[served.sent : served.sent + CHUNK] or b"\0" * CHUNK
            chunk = chunk[: size - served.sent]
            try:
                await resp.write(chunk)
            except ConnectionError:
                return resp  # the client stopped reading
            served.sent += len(chunk)
            if served.status is None:  # cut off: headers and one chunk, then nothing
                assert request.transport is not None
                request.transport.close()
                return resp
        await resp.write_eof()
        return resp
