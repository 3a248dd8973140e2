"""Helpers for the MCP tests: test-server paths, process listing, polling, free ports."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

SERVERS = Path(__file__).parent / "servers"
ECHO = str(SERVERS / "echo_server.py")
HANGING = str(SERVERS / "hanging_server.py")
CRASHING = str(SERVERS / "crashing_server.py")
PY = sys.executable


def echo_entry(**extra: Any) -> dict[str, Any]:
    return {"command": PY, "args": [ECHO], **extra}


def child_pids(root: int | None = None) -> set[int]:
    """Live (non-zombie) descendants of ``root`` (default: this process), from /proc."""
    root = os.getpid() if root is None else root
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if fields[0] == "Z":
            continue
        parents[int(entry)] = int(fields[1])
    found: set[int] = set()
    frontier = {root}
    while frontier:
        frontier = {pid for pid, ppid in parents.items() if ppid in frontier} - found
        found |= frontier
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_until(predicate: Callable[[], bool], what: str, seconds: float = 60.0) -> None:
    """Poll ``predicate`` until true; fail with ``what`` after ``seconds`` (a hang guard only)."""
    for _ in range(int(seconds / 0.05)):
        if predicate():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def is_alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
