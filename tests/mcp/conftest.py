"""Fixtures for MCP tests: a servers-file writer, a registry, and a manager that always stops.

Invariants:
- Every MCP server in these tests is a real subprocess (stdio) or a real loopback HTTP server.
- ``mcp_manager`` stops the manager at teardown even when the test failed, so no test leaves
  server processes behind.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp_helpers import ECHO, PY, free_port

from luna.config import Config
from luna.mcp.manager import MCPManager
from luna.tools.registry import ToolRegistry


@pytest.fixture
def mcp_cfg(luna_config: Callable[..., Config], tmp_path: Path) -> Callable[..., Config]:
    """``mcp_cfg(servers_dict, **config_sections) -> Config`` with the servers file written."""

    def make(servers: dict[str, Any], data: dict[str, Any] | None = None) -> Config:
        (tmp_path / "mcp_servers.json").write_text(json.dumps({"servers": servers}))
        base = {"mcp": {"start_timeout": 20.0, "call_timeout": 20.0}}
        for key, value in (data or {}).items():
            base.setdefault(key, {}).update(value)
        return luna_config(base)

    return make


@pytest.fixture
async def mcp_manager() -> AsyncIterator[Callable[..., MCPManager]]:
    """Factory ``make(cfg, environ=None, **manager_kw) -> (manager, registry)``; all are stopped."""
    made: list[MCPManager] = []

    def make(
        cfg: Config, environ: dict[str, str] | None = None, **manager_kw: Any
    ) -> tuple[MCPManager, ToolRegistry]:
        registry = ToolRegistry(cfg)
        env = dict(os.environ) if environ is None else environ
        manager = MCPManager(cfg, registry, environ=env, **manager_kw)
        made.append(manager)
        return manager, registry

    yield make
    for manager in made:
        await manager.stop()


@pytest.fixture
def http_echo_server() -> Iterator[str]:
    """The echo server speaking streamable HTTP on loopback, as a subprocess; yields its URL."""
    port = free_port()
    proc = subprocess.Popen(
        [PY, ECHO, "--http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            if proc.poll() is not None:
                pytest.fail(f"HTTP echo server exited early with code {proc.returncode}")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("HTTP echo server did not listen within 30 s")
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
