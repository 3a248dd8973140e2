"""MCP's client side over one pair of byte streams: newline-delimited JSON-RPC 2.0, plain dicts.

Why not the MCP SDK's client for stdio servers: importing it (the SDK plus its pydantic models)
costs Luna's process about 0.6 s at every start, on the path to the first model request, while
what Luna needs of the protocol is four messages (``initialize``, ``notifications/initialized``,
``tools/list``, ``tools/call``) and their answers. HTTP servers still go through the SDK
(``luna.mcp.http``), which speaks the same dicts to the rest of Luna.

Invariants:
- Messages are the wire's own JSON objects (camelCase keys, as the MCP specification spells
  them); nothing here validates a result beyond "it is an object": callers read what they need.
- Messages are handled in the order they arrive; one over ``PARSE_IN_THREAD`` bytes is parsed
  in a thread, so a 50 MB tool result does not stall the event loop.
- A line that is not a JSON-RPC 2.0 object goes to ``on_garbage`` (the connection counts and
  reports those); an empty line is skipped. A line over ``MAX_LINE`` bytes ends the session.
- The server's requests are answered: ``ping`` with an empty result, anything else with
  "method not found" (Luna offers no sampling, roots or elicitation). Its notifications go to
  ``on_notification`` by method name.
- When the stream ends, every waiting request fails with :class:`LostInFlight` (it was sent:
  it may have taken effect), or :class:`AnswerTooLarge` when the end was a line over
  ``MAX_LINE``; a request made after that fails with :class:`NotSent` (it never left Luna). A
  request that is cancelled (a call past its timeout) sends ``notifications/cancelled``.
- A request given ``on_progress`` carries ``_meta.progressToken``; the server's
  ``notifications/progress`` for that token go to it while the request waits.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Callable
from typing import Any

from luna.errors import MCPError

PROTOCOL_VERSION = "2025-11-25"  # what Luna asks for in the handshake
# The handshake versions Luna can talk (tools/list and tools/call are the same in each).
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MAX_LINE = 64 * 1024 * 1024  # one message from a server; a larger one ends the session
PARSE_IN_THREAD = 256 * 1024  # a message this large is parsed in a thread, not on the loop
METHOD_NOT_FOUND = -32601


class ConnectionLost(MCPError, ConnectionError):
    """The session with the server ended (it exited, crashed, closed stdout, or the HTTP
    session is gone). This base class says nothing about the request that saw it: a caller
    treats it as :class:`LostInFlight`, the cautious reading."""


class NotSent(ConnectionLost):
    """The request never reached the server (the session was already gone, or the server
    refused the session unread): sending it on a new session runs it once."""


class LostInFlight(ConnectionLost):
    """The request was sent and the session ended before its answer: it may or may not have
    taken effect, so it must never be sent again on Luna's own initiative."""


class AnswerTooLarge(LostInFlight):
    """The server's answer (a line) was over ``MAX_LINE``; the request ran, its answer is lost."""


ProgressCallback = Callable[[float, float | None, str | None], None]


class RemoteError(Exception):
    """The server answered a request with a JSON-RPC error."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class JsonRpcPeer:
    """One connection: send requests and notifications, dispatch what arrives (``run``)."""

    def __init__(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        *,
        on_notification: Callable[[str, dict[str, Any]], None],
        on_garbage: Callable[[str], None],
    ) -> None:
        self.reader, self.writer = reader, writer
        self.on_notification, self.on_garbage = on_notification, on_garbage
        self._ids = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._progress: dict[str, ProgressCallback] = {}  # progressToken -> its request's
        self._lost: ConnectionLost | None = None

    async def run(self) -> None:
        """Read until the stream ends; then every waiting request fails with ConnectionLost."""
        try:
            while True:
                try:
                    line = await self.reader.readline()
                except (ValueError, asyncio.LimitOverrunError) as e:
                    raise AnswerTooLarge(
                        f"it sent an answer over Luna's limit of {MAX_LINE // 2**20} MB for one "
                        "message"
                    ) from e
                if not line:
                    raise LostInFlight("the server closed its output (it exited?)")
                if line.strip():
                    self._dispatch(line, await _parse(line))
        except LostInFlight as e:
            self._end(e)
        except OSError as e:
            self._end(LostInFlight(f"reading from the server failed: {e}"))
        finally:
            self._end(LostInFlight("the connection was closed"))

    def _end(self, lost: LostInFlight) -> None:
        if self._lost is None:
            self._lost = lost
        for future in self._waiting.values():
            if not future.done():
                future.set_exception(self._lost)
        self._waiting.clear()

    def _dispatch(self, line: bytes, message: Any) -> None:
        if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
            self.on_garbage(line.decode("utf-8", "replace").strip())
            return
        method = message.get("method")
        if isinstance(method, str):
            if "id" in message:
                self._answer(message["id"], method)
            else:
                params = message.get("params")
                self._notified(method, params if isinstance(params, dict) else {})
            return
        rid = message.get("id")
        future = self._waiting.pop(rid, None) if isinstance(rid, int) else None
        if future is None or future.done():
            return  # an answer to a request given up on (cancelled or timed out)
        error = message.get("error")
        if isinstance(error, dict):
            code = error.get("code")
            message_text = str(error.get("message") or "error")[:500]
            future.set_exception(RemoteError(code if isinstance(code, int) else 0, message_text))
        else:
            result = message.get("result")
            future.set_result(result if isinstance(result, dict) else {})

    def _notified(self, method: str, params: dict[str, Any]) -> None:
        if method != "notifications/progress":
            self.on_notification(method, params)
            return
        report = self._progress.get(str(params.get("progressToken")))
        progress, total = params.get("progress"), params.get("total")
        if report is None or not isinstance(progress, int | float):
            return  # a token Luna never sent, or one whose request has ended
        message = params.get("message")
        report(
            float(progress),
            float(total) if isinstance(total, int | float) else None,
            message if isinstance(message, str) else None,
        )

    def _answer(self, request_id: Any, method: str) -> None:
        if method == "ping":
            self._send({"jsonrpc": "2.0", "id": request_id, "result": {}})
        else:
            error = {"code": METHOD_NOT_FOUND, "message": f"Luna does not offer {method}"}
            self._send({"jsonrpc": "2.0", "id": request_id, "error": error})

    def _send(self, message: dict[str, Any]) -> None:
        """Write one message; NotSent when the session is gone or the pipe is closed."""
        if self._lost is not None:
            raise NotSent(str(self._lost))
        data = json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n"
        try:
            self.writer.write(data.encode("utf-8"))
        except (OSError, RuntimeError) as e:  # a closed pipe or transport
            raise NotSent(f"writing to the server failed: {e}") from e

    async def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        on_progress: ProgressCallback | None = None,
    ) -> dict[str, Any]:
        """Send one request and wait for its result. Raises RemoteError, NotSent (it never left
        Luna: the session was over before it was written) or LostInFlight (it was written)."""
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._waiting[request_id] = future
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
        token = f"luna-{request_id}"
        if on_progress is not None:
            params = {**(params or {}), "_meta": {"progressToken": token}}
            self._progress[token] = on_progress
        if params is not None:
            message["params"] = params
        try:
            self._send(message)
            await self._drain()
            return await future
        except asyncio.CancelledError:
            if self._waiting.pop(request_id, None) is not None:
                with contextlib.suppress(ConnectionLost):
                    self.notify_nowait(
                        "notifications/cancelled",
                        {"requestId": request_id, "reason": "cancelled by Luna"},
                    )
            raise
        finally:
            self._waiting.pop(request_id, None)
            self._progress.pop(token, None)

    def notify_nowait(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self._send(message)

    async def _drain(self) -> None:
        """Wait for the pipe to take what was written. A failure here comes after ``write``
        took the message, and a line written whole may have been read (another request's
        bytes can be the ones left over), so it counts as LostInFlight."""
        try:
            await self.writer.drain()
        except (OSError, RuntimeError) as e:
            raise LostInFlight(f"writing to the server failed: {e}") from e


async def _parse(line: bytes) -> Any:
    """The JSON value of ``line``, or None; a large one is parsed off the event loop."""
    try:
        if len(line) > PARSE_IN_THREAD:
            return await asyncio.to_thread(json.loads, line)
        return json.loads(line)
    except ValueError:
        return None


class RpcSession:
    """The MCP client calls Luna makes, over a :class:`JsonRpcPeer` whose ``run`` is going."""

    def __init__(self, peer: JsonRpcPeer, client_name: str, client_version: str) -> None:
        self.peer = peer
        self.client_info = {"name": client_name, "version": client_version}

    async def initialize(self) -> None:
        result = await self.peer.request(
            "initialize",
            {
                "protocolVersion": PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": self.client_info,
            },
        )
        version = result.get("protocolVersion")
        if version not in PROTOCOL_VERSIONS:
            raise RemoteError(0, f"it speaks MCP version {version!r}, which Luna does not know")
        self.peer.notify_nowait("notifications/initialized")

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every page of ``tools/list``: the tools as the server declares them."""
        return await self._pages("tools/list", "tools")

    async def _pages(self, method: str, key: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cursor: Any = None
        while True:
            page = await self.peer.request(method, {"cursor": cursor} if cursor else None)
            listed = page.get(key)
            if not isinstance(listed, list):
                raise RemoteError(0, f"its {method} answer has no list of {key}")
            items += [item for item in listed if isinstance(item, dict)]
            cursor = page.get("nextCursor")
            if not cursor:
                return items

    async def call_tool(
        self, name: str, arguments: dict[str, Any], on_progress: ProgressCallback | None = None
    ) -> dict[str, Any]:
        params = {"name": name, "arguments": arguments}
        return await self.peer.request("tools/call", params, on_progress=on_progress)

    async def list_resources(self) -> list[dict[str, Any]]:
        """Every page of ``resources/list``."""
        return await self._pages("resources/list", "resources")

    async def read_resource(self, uri: str) -> dict[str, Any]:
        return await self.peer.request("resources/read", {"uri": uri})
