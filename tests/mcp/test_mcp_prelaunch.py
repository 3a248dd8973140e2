"""Servers started at start-up (luna.mcp.launch.prelaunch): adopted once, else stopped."""

from __future__ import annotations

import dataclasses
import os

from mcp_helpers import echo_entry, is_alive
from test_mcp_manager import started

from luna.mcp.launch import prelaunch


def test_prelaunch_starts_enabled_stdio_servers_and_hands_each_out_once(mcp_cfg) -> None:
    cfg = mcp_cfg(
        {
            "echo": echo_entry(),
            "off": echo_entry(enabled=False),
            "web": {"url": "http://127.0.0.1:9/mcp"},
            "bad": {"command": "x", "env": {"K": "${NOT_SET_ANYWHERE}"}},
        }
    )
    early = prelaunch(cfg, os.environ)
    try:
        assert sorted(early.processes) == ["echo"]
        spec = next(s for s in early.servers.servers if s.name == "echo")
        process = early.processes["echo"].process
        assert process.poll() is None
        assert early.claim(dataclasses.replace(spec, args=[*spec.args, "--changed"])) is None
        launched = early.claim(spec)
        assert launched is not None and launched.process is process
        assert early.claim(spec) is None  # once
        early.processes["echo"] = launched  # put back: stop_unclaimed must stop it
    finally:
        early.stop_unclaimed()
    assert process.poll() is not None and not early.processes


async def test_prelaunched_processes_nobody_adopts_are_stopped(mcp_cfg, mcp_manager) -> None:
    cfg = mcp_cfg({"echo": echo_entry(), "other": echo_entry()})
    early = prelaunch(cfg, os.environ)
    pids = {name: launched.process.pid for name, launched in early.processes.items()}
    manager, registry = mcp_manager(cfg, prelaunched=early)
    await manager.start(only=["other"])  # "echo" is left out: its process must not linger
    assert await manager.wait_ready(60)
    assert not is_alive(pids["echo"])
    assert "other__add" in registry.names()
    await manager.stop()
    assert not is_alive(pids["other"])


async def test_prelaunched_process_that_died_is_started_again(mcp_cfg, mcp_manager) -> None:
    cfg = mcp_cfg({"echo": echo_entry()})
    early = prelaunch(cfg, os.environ)
    dead = early.processes["echo"].process
    dead.kill()
    dead.wait()
    manager, registry = await started(mcp_manager, cfg, prelaunched=early)
    result = await manager.call("echo__add", {"a": 40})
    assert (result.content, result.is_error) == ("42", False)
