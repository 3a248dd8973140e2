"""An HTTP MCP server's session, through the MCP SDK (streamable HTTP), as plain dicts.

The SDK is imported here only, so a Luna with stdio servers alone never pays for it (see
``luna.mcp.rpc``). Results and tool declarations are handed on as the wire's JSON objects,
exactly what :class:`luna.mcp.rpc.RpcSession` returns, and the SDK's failures become
:class:`~luna.mcp.rpc.ConnectionLost` (the session is gone) or
:class:`~luna.mcp.rpc.RemoteError` (the server answered with an error).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx2
import mcp_types as types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError as SDKError
from pydantic import ValidationError

from luna.mcp.config import ServerSpec
from luna.mcp.rpc import ConnectionLost, RemoteError


def _as_dict(model: Any) -> dict[str, Any]:
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


class HttpSession:
    """``initialize`` / ``list_tools`` / ``call_tool`` over an SDK ClientSession."""

    def __init__(self, session: ClientSession) -> None:
        self.session = session

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

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return _as_dict(await self._guard(self.session.call_tool(name, arguments)))


@contextlib.asynccontextmanager
async def http_session(
    spec: ServerSpec,
    client_name: str,
    client_version: str,
    on_notification: Callable[[str, dict[str, Any]], None],
) -> AsyncIterator[HttpSession]:
    """An open session with ``spec``'s server (not yet initialized)."""

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            on_notification("notifications/tools/list_changed", {})

    info = types.Implementation(name=client_name, version=client_version)
    try:
        async with (
            create_mcp_http_client(headers=spec.headers or None) as client,
            streamable_http_client(spec.url, http_client=client) as (read, write),
            ClientSession(read, write, message_handler=on_message, client_info=info) as session,
        ):
            yield HttpSession(session)
    except httpx2.TransportError as e:
        raise ConnectionLost(str(e) or type(e).__name__) from e
