"""``luna mcp list | tools [SERVER] | resources [SERVER] | call SERVER__TOOL JSON``: inspect and
debug MCP servers.

Invariants: every command starts only the servers it needs, waits at most
``mcp.start_timeout`` (+5 s) for them, and always stops them before returning, also on SIGTERM,
so no server process outlives the command. Exit codes: 0 ok, 1 failure (server down, tool
error), 2 usage, 143 terminated by SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from luna.config import Config
from luna.errors import MCPError, UsageError
from luna.messages import neutralize, terminal_json

if TYPE_CHECKING:  # imported when a command runs: the MCP SDK alone costs about 0.5 s
    from luna.mcp.manager import MCPManager
    from luna.tools.registry import ToolRegistry

Handler = Callable[[argparse.Namespace, Config], Awaitable[int]]


def _stop_on_sigterm(fn: Handler) -> Handler:
    """Turn SIGTERM into a cancellation of the command, so its ``finally`` stops the servers."""

    @functools.wraps(fn)
    async def wrapper(args: argparse.Namespace, cfg: Config) -> int:
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        terminated = False

        def on_sigterm() -> None:
            nonlocal terminated
            terminated = True
            if task is not None:
                task.cancel()

        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
        try:
            return await fn(args, cfg)
        except asyncio.CancelledError:
            if not terminated:
                raise
            print("terminated", file=sys.stderr)
            return 143
        finally:
            loop.remove_signal_handler(signal.SIGTERM)

    return wrapper


def add_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("mcp", help="list, inspect and call MCP tool servers")
    sub = p.add_subparsers(dest="mcp_command", metavar="ACTION", required=True)
    lst = sub.add_parser("list", help="start every server and show its status and tool count")
    lst.set_defaults(handler=list_servers)
    tools = sub.add_parser("tools", help="show the tools servers offer, as the model sees them")
    tools.add_argument("server", nargs="?", help="only this server")
    tools.add_argument("--schema", action="store_true", help="also print each parameter schema")
    tools.set_defaults(handler=list_tools)
    res = sub.add_parser("resources", help="show the resources servers list (resources/list)")
    res.add_argument("server", nargs="?", help="only this server")
    res.set_defaults(handler=list_resources)
    call = sub.add_parser(
        "call",
        help="call one MCP tool directly, for debugging",
        description='Example: luna mcp call time__get_current_time \'{"timezone": "UTC"}\'',
    )
    call.add_argument("tool", help="the namespaced tool name, SERVER__TOOL")
    call.add_argument("arguments", nargs="?", default="{}", help="JSON object (default {})")
    call.set_defaults(handler=call_tool)


async def _started(cfg: Config, only: list[str] | None = None) -> tuple[MCPManager, ToolRegistry]:
    from luna.mcp.manager import MCPManager
    from luna.tools.registry import ToolRegistry

    registry = ToolRegistry(cfg)
    manager = MCPManager(cfg, registry)
    await manager.start(only=only)
    await manager.wait_ready(cfg.mcp.start_timeout + 5)
    return manager, registry


@_stop_on_sigterm
async def list_servers(args: argparse.Namespace, cfg: Config) -> int:
    manager, _ = await _started(cfg)
    try:
        print(f"servers file: {cfg.mcp.servers_file}")
        if manager.file_error:
            print(neutralize(f"error: {manager.file_error}"))
            return 1
        rows = manager.status()
        if not rows:
            print("no MCP servers configured")
            return 0
        width = max(len(s.name) for s in rows)
        print(f"{'SERVER':<{width}}  {'STATE':<9} {'TRANSPORT':<9} {'EXPOSE':<7} TOOLS  ERROR")
        for s in rows:
            print(
                neutralize(
                    f"{s.name:<{width}}  {s.state:<9} {s.transport:<9} {s.expose:<7} "
                    f"{s.tools:>5}  {s.error or ''}"
                )
            )
        return 0
    finally:
        await manager.stop()


@_stop_on_sigterm
async def list_tools(args: argparse.Namespace, cfg: Config) -> int:
    only = [args.server] if args.server else None
    manager, registry = await _started(cfg, only)
    try:
        if args.server and args.server not in manager.servers:
            raise UsageError(f"there is no server named {args.server!r} in {cfg.mcp.servers_file}")
        for s in manager.status():
            if s.state != "running":
                print(neutralize(f"# {s.name}: {s.state}{': ' + s.error if s.error else ''}"))
        for name, _server, _original in manager.tools(args.server):
            info = registry.get(name)
            if info is None:
                continue
            first_line = info.description.strip().splitlines()[0] if info.description else ""
            print(neutralize(f"{name}  [{info.expose}, {info.level}]  {first_line}"))
            if args.schema:
                print("    " + terminal_json(info.parameters))
        return 0
    finally:
        await manager.stop()


@_stop_on_sigterm
async def list_resources(args: argparse.Namespace, cfg: Config) -> int:
    from luna.mcp.resources import list_resources as listed

    only = [args.server] if args.server else None
    manager, _ = await _started(cfg, only)
    try:
        if args.server and args.server not in manager.servers:
            raise UsageError(f"there is no server named {args.server!r} in {cfg.mcp.servers_file}")
        failed = False
        for server in manager.servers.values():
            if not server.spec.enabled:
                continue
            found = await listed(server)
            if isinstance(found, str):
                failed = True
                print(neutralize(f"# {server.name}: {found}"))
                continue
            for r in found:
                mime = f"  [{r['mimeType']}]" if isinstance(r.get("mimeType"), str) else ""
                name = r.get("name") or ""
                print(neutralize(f"{server.name}  {r.get('uri', '')}  {name}{mime}"))
        return 1 if failed else 0
    finally:
        await manager.stop()


@_stop_on_sigterm
async def call_tool(args: argparse.Namespace, cfg: Config) -> int:
    try:
        arguments: Any = json.loads(args.arguments)
    except json.JSONDecodeError as e:
        raise UsageError(f"ARGUMENTS is not valid JSON: {e}") from None
    if not isinstance(arguments, dict):
        raise UsageError('ARGUMENTS must be a JSON object, like \'{"path": "notes.txt"}\'')
    server, sep, _ = args.tool.partition("__")
    if not sep:
        raise UsageError("the tool name must be SERVER__TOOL (see `luna mcp tools`)")
    manager, _ = await _started(cfg, [server])
    try:
        status = {s.name: s for s in manager.status()}.get(server)
        if status is None:
            raise UsageError(f"there is no server named {server!r} in {cfg.mcp.servers_file}")
        if status.state != "running":
            raise MCPError(
                neutralize(
                    f"server {server!r} is {status.state}: {status.error or 'no reason given'}"
                )
            )
        result = await manager.call(args.tool, arguments)
        print(neutralize(result.content))
        return 1 if result.is_error else 0
    finally:
        await manager.stop()
