"""All configured MCP servers: start them in parallel, expose their tools, call, stop.

Invariants:
- ``start()`` returns at once; servers start in background tasks, and one that fails or hangs
  (``mcp.start_timeout``) is logged and skipped without delaying the others. A bad entry in
  mcp_servers.json is reported by server name (``status()``) and skipped.
- Tools are registered as ``<server>__<tool>`` (``mcp_config.qualify_names``) with the server's
  ``expose`` mode and permission level: the server's ``permission`` (default ``allow``: adding
  a server to mcp_servers.json is the owner's consent), overridable per tool name through
  ``tools.permissions`` (the registry resolves that). The registry gets no timeout of its own:
  each server's ``timeout`` is enforced here.
- Results are returned unshaped; ``ToolRegistry.execute`` passes every tool result, MCP ones
  included, through ``tool_output.shape_output`` exactly once.
- ``stop()`` ends every server (no orphan processes) and unregisters all MCP tools.
- The manager is the registry's provider for every ``server__tool`` name: ``settle()`` waits
  for servers still starting (each up to its own ``timeout``, all at once) and names those
  left out; a call to a name that is not registered (its server still starting, failed or
  crashed) first tries to bring that server back, else gets one line saying it is not running.
- ``${VAR}`` expansion reads the process environment (or the ``environ`` given), and a server
  process gets only the variables its ``env`` names plus a non-secret base.
- A tool that can only be called as an MCP task (``execution.taskSupport: "required"``) is not
  offered: Luna does not speak the tasks extension, and every call would fail. It is named in
  ``server.left_out`` and the log instead.
- ``mcp_read_resource`` (``luna.mcp.resources``) is registered when the file has an enabled
  server; a call's progress lines go to the turn's ``ToolContext.on_progress``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from luna.config import Config
from luna.mcp.config import load_servers, qualify_names, to_parameters, tool_description
from luna.mcp.content import READ_TOOL
from luna.mcp.resources import ResourceReader
from luna.mcp.session import ServerConnection, ServerStatus
from luna.messages import ToolResult
from luna.observe import log_event

if TYPE_CHECKING:
    from luna.mcp.launch import Prelaunched
    from luna.tools.registry import ToolContext, ToolRegistry

log = logging.getLogger(__name__)

__all__ = ["MCPManager", "ServerStatus"]

TASK_ONLY = "it can only be called as an MCP task, which Luna does not support"


class MCPManager:
    """All configured MCP servers; see the module docstring for the guarantees."""

    def __init__(
        self,
        cfg: Config,
        registry: ToolRegistry,
        *,
        environ: Mapping[str, str] | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        prelaunched: Prelaunched | None = None,
    ) -> None:
        self.cfg = cfg
        self.prelaunched = prelaunched  # the servers file and processes read at start-up
        self._clock, self._sleep = clock, sleep  # for every server's restart backoff
        self.registry = registry
        self.environ: Mapping[str, str] = os.environ if environ is None else environ
        self.servers: dict[str, ServerConnection] = {}
        self.file_error: str | None = None
        self.is_stopping = False
        self._boots: dict[str, asyncio.Task[None]] = {}  # server -> its first start
        registry.providers.append(self)

    async def start(self, only: Iterable[str] | None = None) -> None:
        """Read mcp_servers.json and start every enabled, valid server in the background."""
        early, self.prelaunched = self.prelaunched, None
        if early is not None:  # read once at start-up, its servers already starting
            parsed = early.servers
        else:
            parsed = await asyncio.to_thread(
                load_servers,
                self.cfg.mcp.servers_file,
                self.environ,
                call_timeout=self.cfg.mcp.call_timeout,
            )
        self.file_error = parsed.error
        if parsed.error:
            log.error("MCP servers file: %s", parsed.error)
            log_event("mcp_server", server="*", status="failed", error=parsed.error)
        wanted = set(only) if only is not None else None
        for spec in parsed.servers:
            if wanted is not None and spec.name not in wanted:
                continue
            server = ServerConnection(
                spec,
                self.cfg,
                self.environ,
                self._register,
                clock=self._clock,
                sleep=self._sleep,
                launched=early.claim(spec) if early is not None else None,
            )
            self.servers[spec.name] = server
            if spec.error:
                log.error("MCP server %r skipped: %s", spec.name, spec.error)
                log_event("mcp_server", server=spec.name, status="failed", error=server.error)
            elif not spec.enabled:
                log_event("mcp_server", server=spec.name, status="disabled")
            else:
                task = asyncio.create_task(self._boot(server), name=f"mcp-boot-{spec.name}")
                self._boots[spec.name] = task
                task.add_done_callback(functools.partial(self._booted, spec.name))
        if any(s.spec.enabled and not s.spec.error for s in self.servers.values()):
            ResourceReader(self.servers).register(self.registry)
        if early is not None and early.processes:  # entries filtered out by ``only``
            await asyncio.to_thread(early.stop_unclaimed)

    def _booted(self, name: str, _boot: asyncio.Task[None]) -> None:
        self._boots.pop(name, None)

    async def _boot(self, server: ServerConnection) -> None:
        async with server.lock:
            if not self.is_stopping:
                await server.start_and_wait()

    def _register(self, server: ServerConnection, tools: list[dict[str, Any]]) -> None:
        """Replace ``server``'s tools in the registry with ``tools`` (start, restart, refresh):
        the declarations as the server wrote them; one without a string name is skipped."""
        if self.is_stopping:
            return
        self.registry.unregister_prefix(f"{server.name}__")
        named = [t for t in tools if isinstance(t.get("name"), str) and t["name"]]
        server.left_out = {t["name"]: TASK_ONLY for t in named if _task_only(t)}
        for name in server.left_out:
            log.info("MCP server %r: tool %r left out: %s", server.name, name, TASK_ONLY)
        named = [t for t in named if t["name"] not in server.left_out]
        names = qualify_names(server.name, [t["name"] for t in named])
        server.tool_names = {}
        for tool in sorted(named, key=lambda t: names[t["name"]]):
            original = tool["name"]
            qualified = names[original]
            if qualified in server.tool_names:
                continue  # a server listing the same name twice: keep the first
            server.tool_names[qualified] = original
            self.registry.register(
                qualified,
                tool_description(
                    server.name, original, _text(tool, "description"), _text(tool, "title")
                ),
                to_parameters(tool.get("inputSchema")),
                functools.partial(self._handle, qualified),
                level=server.spec.permission,
                expose=server.spec.expose,
                timeout=None,
            )

    async def wait_ready(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Wait until every server has finished starting (running or failed); False on timeout."""
        if not self._boots:
            return True
        _, pending = await asyncio.wait(set(self._boots.values()), timeout=timeout)
        return not pending

    async def stop(self) -> None:
        """Stop every server and unregister its tools; safe to call twice."""
        self.is_stopping = True
        for s in self.servers.values():
            s.is_stopping = True
        boots = list(self._boots.values())
        for task in boots:
            task.cancel()
        servers = list(self.servers.values())
        await asyncio.gather(*(s.cancel_revival() for s in servers))
        await asyncio.gather(
            *(s.stop_runner() for s in servers),
            *(s.discard_launched() for s in servers),
            return_exceptions=True,
        )
        for task in boots:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for s in servers:
            if s.state in ("running", "starting"):
                s.state = "stopped"
                log_event("mcp_server", server=s.name, status="stopped")
            self.registry.unregister_prefix(f"{s.name}__")
            s.tool_names = {}
        self.registry.unregister_prefix(READ_TOOL)

    def status(self) -> list[ServerStatus]:
        return [s.status() for s in self.servers.values()]

    def tools(self, server: str | None = None) -> list[tuple[str, str, str]]:
        """(qualified name, server, original tool name) for registered MCP tools."""
        return [
            (q, s.name, original)
            for s in self.servers.values()
            if server is None or s.name == server
            for q, original in sorted(s.tool_names.items())
        ]

    async def call(
        self,
        qualified_name: str,
        arguments: dict[str, Any],
        report: Callable[[str], None] | None = None,
    ) -> ToolResult:
        """Call ``<server>__<tool>`` (progress lines to ``report``); never raises except
        CancelledError."""
        server_name, _, _ = qualified_name.partition("__")
        server = self.servers.get(server_name)
        original = server.tool_names.get(qualified_name) if server else None
        if server is None or original is None:
            known = ", ".join(q for q, _, _ in self.tools()) or "none"
            return ToolResult(f"Unknown MCP tool '{qualified_name}'. Known: {known}", True)
        return await server.call(original, arguments, report)

    # ---- the registry's provider (luna.tools.contract.ToolProvider) ------------------------

    def owns(self, name: str) -> bool:
        return "__" in name  # every MCP tool is server__tool; no native tool name has "__"

    async def settle(self) -> list[str]:
        """Wait for servers still starting, each up to its own ``timeout`` and all at once;
        then one line for the file and for each enabled server that is not running."""
        booting = [(self.servers[name], task) for name, task in list(self._boots.items())]
        await asyncio.gather(*(asyncio.wait({t}, timeout=s.spec.timeout) for s, t in booting))
        lines = [f"mcp_servers.json: {self.file_error}"] if self.file_error else []
        for s in self.servers.values():
            if not s.spec.enabled or s.state == "running":
                continue
            why = "still starting" if s.state == "starting" else (s.error or s.state)
            lines.append(
                f"MCP server '{s.name}' is not running ({why}); this session starts without "
                "its tools (use_tool reaches them once it is up)."
            )
        return lines

    async def revive(self, name: str) -> str | None:
        """Bring the server of an unregistered ``server__tool`` back if it can be."""
        server_name, _, tool = name.partition("__")
        server = self.servers.get(server_name)
        if server is None:
            return f"There is no MCP server '{server_name}' in mcp_servers.json (any more)."
        boot = self._boots.get(server_name)
        if boot is not None:  # its first start is still under way: wait for it, bounded
            await asyncio.wait({boot}, timeout=server.spec.timeout)
        problem = await server.ensure_started(in_call=True) if server.session is None else None
        if name in server.tool_names:
            return None
        if problem or server.session is None:
            return server.not_running(problem or server.state)
        listed = ", ".join(sorted(server.tool_names)) or "none"
        return f"The MCP server '{server_name}' has no tool '{tool}' now (it lists: {listed})."

    async def _handle(
        self, qualified_name: str, arguments: dict[str, Any], ctx: ToolContext
    ) -> ToolResult:
        """The registry handler for every MCP tool."""
        return await self.call(qualified_name, arguments, ctx.on_progress)


def _task_only(tool: dict[str, Any]) -> bool:
    """The tool declares ``execution.taskSupport: "required"``."""
    execution = tool.get("execution")
    return isinstance(execution, dict) and execution.get("taskSupport") == "required"


def _text(tool: dict[str, Any], key: str) -> str | None:
    value = tool.get(key)
    return value if isinstance(value, str) else None
