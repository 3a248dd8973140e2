"""The ``bash`` tool: one shell command in the workspace, confined by bubblewrap.

Invariants:
- The command runs in the workspace (or the sub-agent's folder inside it) with the allowlisted
  environment from ``tool_env``; inside bwrap when ``registry.sandbox.ok`` (checked once by
  ``build_registry``), otherwise unconfined and the registry forces the 'ask' level.
- Timeout: ``tools.bash_timeout`` by default, never more than ``tools.bash_max_timeout``; on
  timeout or cancellation the whole process group is killed (and bwrap's PID namespace with it).
- Output (stdout and stderr interleaved) is read in chunks and capped at
  ``tools.output_cap_bytes``: the head and the tail are kept, the middle is counted and dropped,
  so a command printing gigabytes costs constant memory. The exit code is always reported.
- Every command runs under its resource limits (``luna.tools.limits``: /tmp size, file size,
  workspace quota, processes, memory), through the stdlib exec wrapper; each limit it hits
  is one more line after the exit code.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import deque
from pathlib import Path

from luna.config import Config
from luna.errors import ToolError
from luna.tools.limit_exec import disk_usage
from luna.tools.limits import Limits, limit_lines, read_verdict, wrap
from luna.tools.registry import ToolContext, ToolRegistry
from luna.tools.sandbox import bwrap_command, tool_env

CHUNK = 65536


class CappedBuffer:
    """Keeps the first ``head`` and last ``tail`` bytes of a stream, counting the rest."""

    def __init__(self, cap: int) -> None:
        self.head_cap = max(cap * 4 // 5, 1)
        self.tail_cap = max(cap - self.head_cap, 0)
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_len = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data and self.tail_cap:
            self.tail.append(data)
            self.tail_len += len(data)
            while self.tail and self.tail_len - len(self.tail[0]) >= self.tail_cap:
                self.tail_len -= len(self.tail.popleft())

    def text(self) -> str:
        head = self.head.decode("utf-8", "replace")
        tail_bytes = b"".join(self.tail)[-self.tail_cap :] if self.tail_cap else b""
        dropped = self.total - len(self.head) - len(tail_bytes)
        if dropped <= 0:
            return head + tail_bytes.decode("utf-8", "replace")
        return (
            f"{head}\n[... {dropped} bytes of output omitted (output cap) ...]\n"
            + tail_bytes.decode("utf-8", "replace")
        )


async def run_command(
    cfg: Config, command: str, *, limit: float, cwd: Path, sandboxed: bool
) -> tuple[int | None, str, bool, list[str]]:
    """(exit code or None when killed, capped output, timed_out, one line per limit hit)."""
    env = tool_env(cfg)
    workspace = cfg.agent.workspace.resolve()
    used = await asyncio.to_thread(disk_usage, str(workspace))
    report_r, report_w = os.pipe()
    try:
        argv = wrap(
            Limits.from_config(cfg),
            ["/bin/bash", "-c", command],
            workspace=workspace,
            used_bytes=used,
            report_fd=report_w,
            sandboxed=sandboxed,
        )
        if sandboxed:
            argv = bwrap_command(cfg, argv, cwd, env)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                cwd=str(cwd),
                env=env,
                start_new_session=True,
                pass_fds=(report_w,),
            )
        except OSError as e:
            raise ToolError(f"could not start bash: {e.strerror}") from e
        finally:
            os.close(report_w)
        code, output, timed_out = await _collect(cfg, proc, limit)
        verdict = read_verdict(_read_now(report_r))
    finally:
        os.close(report_r)
    reported = verdict.get("used")
    if isinstance(reported, int):
        after = reported
    else:  # no verdict (killed at the timeout): measure here
        after = await asyncio.to_thread(disk_usage, str(workspace))
    return code, output, timed_out, limit_lines(cfg, verdict, used, after)


def _read_now(fd: int) -> bytes:
    """What the wrapper wrote to its report pipe (it has exited): never waits."""
    os.set_blocking(fd, False)
    data = b""
    with contextlib.suppress(BlockingIOError):
        while chunk := os.read(fd, 4096):
            data += chunk
    return data


async def _collect(
    cfg: Config, proc: asyncio.subprocess.Process, limit: float
) -> tuple[int | None, str, bool]:
    buf = CappedBuffer(cfg.tools.output_cap_bytes)
    timed_out = False

    async def pump() -> None:
        assert proc.stdout is not None  # set by PIPE above
        while chunk := await proc.stdout.read(CHUNK):
            buf.feed(chunk)
        await proc.wait()

    try:
        async with asyncio.timeout(limit):
            await pump()
    except TimeoutError:
        timed_out = True
    finally:
        if proc.returncode is None:
            _kill_group(proc.pid)
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await asyncio.shield(proc.wait())
    code = None if timed_out else proc.returncode
    return code, buf.text(), timed_out


def _kill_group(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)


def register(reg: ToolRegistry, cfg: Config) -> None:
    sandboxed = reg.sandbox.ok  # checked once by build_registry; not ok => the registry asks

    @reg.tool(level="ask", timeout=None)
    async def bash(
        command: str,
        timeout: float | None = None,  # noqa: ASYNC109 - the model-facing name
        *,
        ctx: ToolContext,
    ) -> str:
        """Run a bash command in your workspace and return its output and exit code.

        The filesystem outside the workspace is read-only, /tmp is private and the network is
        off unless the owner enabled it. Prefer short, non-interactive commands.

        Args:
            command: The bash command line to run.
            timeout: Seconds before the command is killed (default 30, at most 120).
        """
        limit = cfg.tools.bash_timeout if timeout is None else float(timeout)
        limit = min(max(limit, 1.0), cfg.tools.bash_max_timeout)
        cwd = (ctx.workdir or cfg.agent.workspace).resolve()
        workspace = cfg.agent.workspace.resolve()
        if not cwd.is_relative_to(workspace):
            cwd = workspace
        cwd.mkdir(parents=True, exist_ok=True)
        code, output, timed_out, notes = await run_command(
            cfg, command, limit=limit, cwd=cwd, sandboxed=sandboxed
        )
        if timed_out:
            status = f"[timed out after {limit:g} s; the command and its children were killed]"
        else:
            status = f"[exit code: {code}]"
        status = "\n".join([status, *notes])
        return f"{output.rstrip()}\n{status}" if output.strip() else status
