"""Run llama.cpp's ``llama-server`` binary as a child process: start, wait until healthy, stop.

Used by the embedded demo model, and by the tests and benchmarks that need the real server.

Invariants:
- The binary is the one ``.ci/install`` builds into the virtualenv (``<venv>/bin/llama-server``)
  unless a path is given; a missing binary is an LLMError that says how to install it.
- The server listens on 127.0.0.1 only, runs in its own process group, writes its output to a
  log file, and dies with Luna: the kernel sends it SIGKILL when Luna's process goes, even on
  ``kill -9`` (``PR_SET_PDEATHSIG``, set by a tiny exec wrapper because a C++ binary cannot set
  it on itself and ``preexec_fn`` is unsafe in a threaded process). SIGKILL, not SIGTERM: with
  nobody left to wait for it, a graceful shutdown only gives the server a way to linger (one
  outlived its killed parent by 30 s in a full test run).
- ``start()`` returns once ``/health`` answers 200 (it answers 503 while the model loads), or
  raises LLMError naming the log file.
- ``stop()`` leaves no process behind: SIGTERM to the group, SIGKILL after a grace period.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import IO

import httpx

from luna.errors import LLMError

START_TIMEOUT = 120.0
STOP_GRACE = 5.0
# Sets PR_SET_PDEATHSIG, checks the parent did not die meanwhile, then execs the server: the
# death signal survives execve, so llama-server itself gets SIGKILL when Luna dies.
EXEC_WITH_PARENT = (
    "import ctypes, os, signal, sys\n"
    "parent = int(sys.argv[1])\n"
    "if sys.platform == 'linux':\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"
    "if os.getppid() != parent:\n"
    "    sys.exit(0)\n"
    "os.execv(sys.argv[2], sys.argv[2:])\n"
)


def default_binary() -> Path:
    """``llama-server`` next to this interpreter (where ``.ci/install`` puts it)."""
    return Path(sys.executable).parent / "llama-server"


def templates_dir() -> Path:
    """The chat templates of the llama.cpp tree the binary was built from."""
    return Path(sys.prefix) / "share" / "llama.cpp" / "templates"


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class LlamaServer:
    """One llama-server child process on loopback."""

    def __init__(
        self,
        model: Path,
        *,
        args: Sequence[str] = (),
        port: int = 0,
        log_path: Path,
        binary: Path | None = None,
        start_timeout: float = START_TIMEOUT,
    ) -> None:
        self.model = model
        self.args = list(args)
        self.host = "127.0.0.1"
        self.port = port
        self.log_path = log_path
        self.binary = binary or default_binary()
        self.start_timeout = start_timeout
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The OpenAI-compatible base URL."""
        return f"{self.root_url}/v1"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    def command(self) -> list[str]:
        return [
            str(self.binary),
            "--model",
            str(self.model),
            "--host",
            self.host,
            "--port",
            str(self.port),
            *self.args,
        ]

    async def start(self) -> str:
        """Launch the server and wait until it is healthy; returns the /v1 URL."""
        if self.is_running:
            return self.url
        if not self.binary.exists():
            raise LLMError(
                f"llama-server is not installed at {self.binary}; run `bash .ci/install` "
                "(it builds llama-server once, about 4 minutes, then reuses the build)"
            )
        if self.port == 0:
            self.port = free_port(self.host)
        log = await asyncio.to_thread(self._open_log)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                EXEC_WITH_PARENT,
                str(os.getpid()),
                *self.command(),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log.close()
        try:
            await self._wait_healthy()
        except BaseException:
            await self.stop()
            raise
        return self.url

    def _open_log(self) -> IO[bytes]:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        return self.log_path.open("ab")

    async def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        async with httpx.AsyncClient(timeout=2.0, trust_env=False) as client:
            while time.monotonic() < deadline:
                if self._proc is None or self._proc.returncode is not None:
                    code = self._proc.returncode if self._proc else None
                    raise LLMError(
                        f"llama-server exited with code {code} while starting; see {self.log_path}"
                    )
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get(f"{self.root_url}/health")).status_code == 200:
                        return
                await asyncio.sleep(0.1)
        raise LLMError(
            f"llama-server did not become healthy within {self.start_timeout:g}s; "
            f"see {self.log_path}"
        )

    async def stop(self) -> None:
        """SIGTERM the process group, SIGKILL it after a grace period; idempotent."""
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), STOP_GRACE)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()

    async def __aenter__(self) -> LlamaServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
