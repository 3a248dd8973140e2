"""A started stdio server process as an MCP session: its pipes as asyncio streams, and its stop.

The session lives inside ``stdio_session``; leaving it (normally, by an error or by
cancellation) closes the pipes and stops the process with ``launch.stop_process`` in a thread,
shielded, so a cancelled caller never leaves a server running.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any

from luna.mcp import rpc
from luna.mcp.launch import Launched, stop_process
from luna.mcp.rpc import JsonRpcPeer, RpcSession


@contextlib.asynccontextmanager
async def stdio_session(
    launched: Launched,
    client_name: str,
    client_version: str,
    *,
    on_notification: Callable[[str, dict[str, Any]], None],
    on_garbage: Callable[[str], None],
) -> AsyncIterator[RpcSession]:
    """The session over ``launched``'s stdin/stdout (not yet initialized)."""
    loop = asyncio.get_running_loop()
    process = launched.process
    transports: list[asyncio.BaseTransport] = []
    reading: asyncio.Task[None] | None = None
    try:
        reader = asyncio.StreamReader(limit=rpc.MAX_LINE)  # read at start: one limit per session
        read_side, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), process.stdout
        )
        transports.append(read_side)
        write_side, protocol = await loop.connect_write_pipe(
            asyncio.streams.FlowControlMixin, process.stdin
        )
        transports.append(write_side)
        writer = asyncio.StreamWriter(write_side, protocol, None, loop)
        peer = JsonRpcPeer(reader, writer, on_notification=on_notification, on_garbage=on_garbage)
        reading = asyncio.create_task(peer.run(), name=f"mcp-read-{launched.spec.name}")
        yield RpcSession(peer, client_name, client_version)
    finally:
        if reading is not None:
            reading.cancel()
        for transport in transports:
            transport.close()  # closes the server's stdin: the first step of its shutdown
        await asyncio.shield(asyncio.to_thread(stop_process, process))
