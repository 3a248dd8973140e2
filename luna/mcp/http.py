"""An HTTP MCP server's session, through the MCP SDK (streamable HTTP), as plain dicts.

The SDK is imported here only, so a Luna with stdio servers alone never pays for it (see
``luna.mcp.rpc``). Results and tool declarations are handed on as the wire's JSON objects,
exactly what :class:`luna.mcp.rpc.RpcSession` returns.

Invariants:
- The SDK's failures become the errors of ``luna.mcp.rpc``, once, here: a request that never
  reached the server (connection refused) or that the server refused for its session (HTTP
  404, the specification's "start a new session"; or another 4xx that a ``ping`` on the same
  session gets too, as server-everything answers 400) is :class:`NotSent`; a request whose
  POST was taken and whose answer never came is :class:`LostInFlight`; a JSON-RPC error is
  :class:`RemoteError`.
- What became of each ``tools/call`` POST is read from the HTTP exchange itself
  (:class:`PostWatch`, keyed by the call's ``progressToken``), never from error texts.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx2
import mcp_types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import MCP_DEFAULT_SSE_READ_TIMEOUT, MCP_DEFAULT_TIMEOUT
from mcp.shared.exceptions import MCPError as SDKError
from pydantic import ValidationError

from luna.mcp.config import ServerSpec
from luna.mcp.rpc import ConnectionLost, LostInFlight, NotSent, ProgressCallback, RemoteError

SESSION_HEADER = "mcp-session-id"
SESSION_GONE = 404  # the specification's answer to a session ID the server does not know
AUTH_STATUSES = (401, 403)  # refused for who Luna is, not for the session


def _as_dict(model: Any) -> dict[str, Any]:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


def _progress_token(request: httpx2.Request) -> str | None:
    """The ``progressToken`` of a POSTed JSON-RPC request, if it carries one."""
    if request.method != "POST":
        return None
    try:
        body = json.loads(request.content or b"null")
    except ValueError:
        return None
    meta = ((body or {}).get("params") or {}).get("_meta") if isinstance(body, dict) else None
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    return str(token) if token is not None else None


class PostWatch(httpx2.AsyncBaseTransport):
    """The HTTP transport under the SDK: notes, per progress token, whether that POST reached
    the server and the HTTP status the server answered it with."""

    def __init__(self, inner: httpx2.AsyncBaseTransport) -> None:
        self.inner = inner
        self.reached: set[str] = set()  # tokens whose POST may have been read by the server
        self.refused: dict[str, int] = {}  # token -> 4xx status, for a POST with a session ID

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        token = _progress_token(request)
        try:
            response = await self.inner.handle_async_request(request)
        except (httpx2.ConnectError, httpx2.ConnectTimeout):
            raise  # the request never left Luna
        except BaseException:
            if token is not None:
                self.reached.add(token)  # written, or partly: it may have been read
            raise
        if token is not None:
            status = response.status_code
            in_session = SESSION_HEADER in request.headers
            if in_session and 400 <= status < 500 and status not in AUTH_STATUSES:
                self.refused[token] = status
            else:
                self.reached.add(token)
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()


class HttpSession:
    """``initialize`` / ``list_tools`` / ``call_tool`` / resources over an SDK ClientSession."""

    _tokens = itertools.count(1)

    def __init__(self, session: ClientSession, watch: PostWatch) -> None:
        self.session = session
        self.watch = watch
        self.progress: dict[str, ProgressCallback] = {}  # progressToken -> its call's

    def on_progress(self, note: types.ProgressNotificationParams) -> None:
        report = self.progress.get(str(note.progress_token))
        if report is not None:
            report(note.progress, note.total, note.message)

    async def _guard(self, call: Awaitable[Any]) -> Any:
        try:
            return await call
        except SDKError as e:
            if e.code == types.CONNECTION_CLOSED:
                raise ConnectionLost(e.message) from e
            raise RemoteError(e.code, e.message) from e
        except httpx2.TransportError as e:
            raise ConnectionLost(str(e) or type(e).__name__) from e
        except ValidationError as e:
            raise RemoteError(0, f"its answer is not valid MCP: {e.error_count()} errors") from e

    async def initialize(self) -> None:
        await self._guard(self.session.initialize())

    async def list_tools(self) -> list[dict[str, Any]]:
        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self._guard(self.session.list_tools(params=params))
            tools += [_as_dict(t) for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                return tools

    async def list_resources(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self._guard(self.session.list_resources(params=params))
            found += [_as_dict(r) for r in page.resources]
            cursor = page.next_cursor
            if not cursor:
                return found

    async def read_resource(self, uri: str) -> dict[str, Any]:
        return _as_dict(await self._guard(self.session.read_resource(uri)))

    async def call_tool(
        self, name: str, arguments: dict[str, Any], on_progress: ProgressCallback | None = None
    ) -> dict[str, Any]:
        """One ``tools/call``, always with a progress token (which also names its POST)."""
        token = f"luna-{next(self._tokens)}"
        if on_progress is not None:
            self.progress[token] = on_progress
        # The wire key is progressToken; RequestParamsMeta is an open map (PEP 728's
        # extra_items=Any), which mypy does not read yet, so it sees an unknown key.
        meta: types.RequestParamsMeta = {"progressToken": token}  # type: ignore[typeddict-unknown-key]
        call = self.session.call_tool(name, arguments, meta=meta)
        try:
            return _as_dict(await self._guard(call))
        except (ConnectionLost, RemoteError) as e:
            raise await self._classify(token, e) from e
        finally:
            self.progress.pop(token, None)

    async def _classify(self, token: str, error: ConnectionLost | RemoteError) -> Exception:
        """What a failed call's POST tells: never read, refused for its session, or lost."""
        status = self.watch.refused.get(token)
        if status is not None and (status == SESSION_GONE or await self._session_refused()):
            return NotSent(f"the server no longer knows Luna's session (HTTP {status})")
        if isinstance(error, RemoteError):
            return error
        if token not in self.watch.reached:
            return NotSent(f"it could not be reached: {error}")
        return LostInFlight(str(error))

    async def _session_refused(self) -> bool:
        """Whether a ``ping`` on this session is refused at the HTTP level too."""
        before = len(self.watch.refused)
        token = f"luna-ping-{next(self._tokens)}"
        try:
            # (an unknown key to mypy, as in call_tool)
            meta: types.RequestParamsMeta = {"progressToken": token}  # type: ignore[typeddict-unknown-key]
            await self.session.send_ping(meta=meta)
        except (SDKError, httpx2.TransportError):
            return token in self.watch.refused or len(self.watch.refused) > before
        return False


@contextlib.asynccontextmanager
async def http_session(
    spec: ServerSpec,
    client_name: str,
    client_version: str,
    on_notification: Callable[[str, dict[str, Any]], None],
) -> AsyncIterator[HttpSession]:
    """An open session with ``spec``'s server (not yet initialized)."""

    opened: list[HttpSession] = []

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            on_notification("notifications/tools/list_changed", {})
        elif isinstance(message, types.ProgressNotification) and opened:
            opened[0].on_progress(message.params)

    info = types.Implementation(name=client_name, version=client_version)
    watch = PostWatch(httpx2.AsyncHTTPTransport())
    timeout = httpx2.Timeout(MCP_DEFAULT_TIMEOUT, read=MCP_DEFAULT_SSE_READ_TIMEOUT)
    try:
        async with (
            httpx2.AsyncClient(headers=spec.headers or None, timeout=timeout, transport=watch) as c,
            streamable_http_client(spec.url, http_client=c) as (read, write),
            ClientSession(read, write, message_handler=on_message, client_info=info) as session,
        ):
            opened.append(HttpSession(session, watch))
            yield opened[0]
    except httpx2.TransportError as e:
        raise ConnectionLost(str(e) or type(e).__name__) from e
