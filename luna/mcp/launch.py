"""Start and stop stdio MCP server processes; start the configured ones early (``prelaunch``).

Why early: a stdio server is a process of its own, and the shipped ``time`` server, like most,
is a Python program that needs about a second to import the MCP SDK before it answers. A
session's first turn waits for it (``luna.agent.head``). So ``run_app`` starts every enabled
stdio server right after taking the data folder's lock, before Luna imports the rest of itself
(this module imports nothing heavy), and each server's first connection adopts its process.

Invariants:
- One owner of how a server process starts: argv ``[command, *args]``, the environment of
  ``server_env`` (secrets only where the server's ``env`` names them), its own process group
  (so stopping it reaches its children), stdin/stdout as pipes, stderr appended to
  ``<observe.log_dir>/mcp/<server>.log``.
- ``stop_process`` closes the server's stdin, gives it ``EXIT_GRACE`` to exit, then sends
  SIGTERM to its process group and, ``KILL_GRACE`` later, SIGKILL; it returns within about
  6 s and reaps the process. It blocks: run it in a thread.
- A prelaunched process nobody claims (its server's entry changed meanwhile, or Luna stopped
  before connecting) is stopped by ``Prelaunched.stop_unclaimed``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from luna.config import Config
from luna.mcp.config import ServersFile, ServerSpec, load_servers, server_env

log = logging.getLogger(__name__)

EXIT_GRACE = 2.0  # after stdin closes, as the MCP specification's shutdown asks
KILL_GRACE = 2.0  # after SIGTERM, before SIGKILL
REAP_WAIT = 2.0  # for the kernel to report a SIGKILLed process gone
POLL_S = 0.01


@dataclass
class Launched:
    """A started server process and where its stderr goes."""

    spec: ServerSpec
    process: subprocess.Popen[bytes]
    stderr_path: Path
    stderr_offset: int  # the log's size before this process wrote to it


def stderr_log(cfg: Config, name: str) -> Path:
    return cfg.observe.log_dir / "mcp" / f"{name}.log"


def spawn(spec: ServerSpec, cfg: Config, environ: Mapping[str, str]) -> Launched:
    """Start ``spec``'s process (blocking: fork and exec). Raises OSError when it cannot."""
    path = stderr_log(cfg, spec.name)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as errlog:
        offset = errlog.tell()
        process = subprocess.Popen(
            [spec.command, *spec.args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=errlog,
            cwd=spec.cwd,
            env=server_env(spec, environ),
            start_new_session=True,
        )
    return Launched(spec, process, path, offset)


def stop_process(process: subprocess.Popen[bytes]) -> None:
    """Close stdin, wait, SIGTERM the process group, wait, SIGKILL it; reap. Blocking."""
    for pipe in (process.stdin, process.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):
                pipe.close()
    if _exited(process, EXIT_GRACE):
        return
    for sig, grace in ((signal.SIGTERM, KILL_GRACE), (signal.SIGKILL, REAP_WAIT)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        if _exited(process, grace):
            return
    log.warning("MCP server process %d is still alive after SIGKILL; leaving it", process.pid)


def _exited(process: subprocess.Popen[bytes], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while process.poll() is None:
        if time.monotonic() >= deadline:
            return False
        time.sleep(POLL_S)
    return True


@dataclass
class Prelaunched:
    """The servers file as read at start and the processes started from it."""

    servers: ServersFile
    processes: dict[str, Launched] = field(default_factory=dict)

    def claim(self, spec: ServerSpec) -> Launched | None:
        """The process started for exactly this entry, once; None for any other."""
        launched = self.processes.get(spec.name)
        if launched is None or launched.spec != spec:
            return None
        del self.processes[spec.name]
        return launched

    def stop_unclaimed(self) -> None:
        """Stop every process nobody claimed (blocking: run it in a thread)."""
        while self.processes:
            _, launched = self.processes.popitem()
            stop_process(launched.process)


def prelaunch(cfg: Config, environ: Mapping[str, str]) -> Prelaunched:
    """Read the servers file and start every enabled, valid stdio server. Blocking.

    A server that cannot be started here is left to its connection, which starts it again
    and reports why it fails."""
    servers = load_servers(cfg.mcp.servers_file, environ, call_timeout=cfg.mcp.call_timeout)
    out = Prelaunched(servers)
    for spec in servers.servers:
        if spec.enabled and not spec.error and spec.transport == "stdio":
            try:
                out.processes[spec.name] = spawn(spec, cfg, environ)
            except (OSError, ValueError):
                continue  # reported by its connection, with the reason
    return out
