"""MCP resources: the ``mcp_read_resource`` tool (a resource link's way forward) and listing.

Invariants:
- A resource is read with ``resources/read`` through the server that owns it, with the URI
  exactly as that server wrote it: Luna never opens a ``file://`` or any other URI itself, so
  the tool reads nothing a server does not serve.
- The tool respects its server's ``permission`` (``deny`` refuses, ``ask`` asks the owner);
  its result goes through the registry's output shaping like any tool result.
- The tool is registered once, when the servers file has an enabled server, so a session's
  head does not depend on which servers happened to be up.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from luna.mcp.content import READ_TOOL
from luna.messages import ToolResult

if TYPE_CHECKING:
    from luna.mcp.session import ServerConnection
    from luna.tools.registry import ToolContext, ToolRegistry

DESCRIPTION = (
    "Read an MCP resource by its URI (from a resource link or a tool result that names one), "
    "through the MCP server that offered it. Give the server's name and the URI exactly as "
    "the server wrote it."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "uri": {"type": "string", "description": "the resource's URI, as the server gave it"},
        "server": {
            "type": "string",
            "description": "the MCP server that offered it (may be left out when there is one)",
        },
    },
    "required": ["uri"],
}


class ResourceReader:
    """The ``mcp_read_resource`` tool over the manager's server connections."""

    def __init__(self, servers: dict[str, ServerConnection]) -> None:
        self.servers = servers

    def register(self, registry: ToolRegistry) -> None:
        registry.register(
            READ_TOOL, DESCRIPTION, PARAMETERS, self.handle, level="allow", timeout=None
        )

    async def handle(self, arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
        uri = str(arguments.get("uri") or "")
        server = self._server(str(arguments.get("server") or ""))
        if isinstance(server, str):
            return ToolResult(server, True)
        refusal = await _refusal(server, uri, ctx)
        if refusal:
            return ToolResult(refusal, True)
        return await server.read_resource(uri)

    def _server(self, name: str) -> ServerConnection | str:
        """The named server, or the only enabled one; else the line saying what to give."""
        enabled = {n: s for n, s in self.servers.items() if s.spec.enabled and not s.spec.error}
        if name:
            found = enabled.get(name)
            if found is None:
                return f"There is no MCP server '{name}'. Servers: {', '.join(enabled) or 'none'}."
            return found
        if len(enabled) == 1:
            return next(iter(enabled.values()))
        return f"Name the server that offered the resource: one of {', '.join(enabled)}."


async def _refusal(server: ServerConnection, uri: str, ctx: ToolContext) -> str | None:
    level = server.spec.permission
    if level == "allow":
        return None
    if level == "deny":
        return f"The MCP server '{server.name}' is disabled by the owner's configuration."
    if ctx.approver is None:
        return f"Reading from '{server.name}' needs the owner's approval, and nobody can approve."
    name = f"{server.name}__{READ_TOOL}"
    if not await ctx.approver(name, {"uri": uri}):
        return f"The owner declined reading {uri} from '{server.name}'."
    return None


async def list_resources(server: ServerConnection) -> list[dict[str, Any]] | str:
    """The server's ``resources/list``, or the line saying why there is none."""
    session = server.session
    if session is None:
        return server.not_running(server.error or server.state)
    try:
        async with asyncio.timeout(server.spec.timeout):
            return await session.list_resources()
    except TimeoutError:
        return f"resources/list timed out after {server.spec.timeout:g} s"
    except Exception as e:  # a listing that fails is shown, never raised
        return f"resources/list failed: {e}"
