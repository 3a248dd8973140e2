"""The real C++ llama-server for tests and benchmarks, rendering requests as production does.

It runs the Gemma 3 270M GGUF with ``--jinja --chat-template-file`` pointing at Qwen3.5's chat
template (the stock one from the llama.cpp tree the binary was built from, or Luna's own), so
every request is rendered, parsed and cached exactly as for Qwen3.5.

Caching follows the production model's rules. Qwen3.5-35B-A3B is hybrid: its recurrent layers
cannot roll back, so a request that does not extend what a slot holds gets back only the
newest context checkpoint before the first difference, or starts over. Gemma's sliding-window
layers behave the same way without ``--swa-full``, so these servers run without it (with it
every rollback is free, which hides exactly what production pays); ``swa_full=True`` is there
for comparison. No host-RAM prompt cache and no KV-shift reuse unless asked for.

Helpers speak the server's own endpoints: ``render`` (/apply-template), ``tokenize``,
``complete`` (/completion with ``n_predict: 0``: evaluates a prompt into the cache, which is
how a scripted model's output can be made to sit in the cache exactly as if generated).

With ``vision=True`` the server also loads a tiny Gemma 3 vision projector with random
weights (``--mmproj``, built by ``.ci/vision_model.py``): its answers are noise, but its image
handling, image tokens and cache are the server's own; ``/props`` reports
``modalities.vision: true``. ``vision="qwen3.5"`` loads one with Qwen3.5's image geometry
instead, to measure what an image costs the production model in tokens.

Nothing here skips: a missing binary or projector fails with the command that builds it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from luna.llm.embedded import ensure_model
from luna.llm.llama_server import EXEC_WITH_PARENT, default_binary, free_port, templates_dir

REPO = Path(__file__).resolve().parents[1]
STOCK_TEMPLATE = templates_dir() / "Qwen3.5-4B.jinja"
LUNA_TEMPLATE = REPO / "luna" / "llm" / "templates" / "qwen3.5-luna.jinja"
ALIAS = "qwen3.5-test"
TEMPLATES = {"stock": STOCK_TEMPLATE, "luna": LUNA_TEMPLATE}


def model_path(cache: Path) -> Path:
    """The Gemma GGUF, assembled once per test session into ``cache``."""
    return ensure_model(cache)


PROJECTORS = {
    "gemma3": "mmproj-gemma3-tiny-random.gguf",
    "qwen3.5": "mmproj-qwen3.5-tiny-random.gguf",
}


def vision_projector(kind: str = "gemma3") -> Path:
    """A cached tiny vision projector (``.ci/vision_model.py`` builds them; so does
    ``.ci/install --dev``): ``gemma3`` pairs with the Gemma model for real, ``qwen3.5`` has
    the production model's image geometry (for what an image costs in tokens)."""
    script = REPO / ".ci" / "vision_model.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--print-cache"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    projector = Path(proc.stdout.strip()) / PROJECTORS[kind]
    if not projector.is_file():
        raise RuntimeError(f"no vision projector at {projector}: run `python3 {script}`")
    return projector


def _kind(vision: bool | str) -> str:
    return vision if isinstance(vision, str) else "gemma3"


class RealLlama:
    """One llama-server process (synchronous start/stop, usable from any event loop)."""

    def __init__(
        self,
        model: Path,
        log_path: Path,
        *,
        template: str = "stock",
        ctx: int = 8192,
        slots: int = 1,
        extra: tuple[str, ...] = (),
        cache_ram: int = 0,
        swa_full: bool = False,
        vision: bool | str = False,
    ) -> None:
        binary = default_binary()
        if not binary.exists():
            raise RuntimeError(
                f"llama-server is not installed at {binary}: run `bash .ci/install --dev`"
            )
        self.template = TEMPLATES[template]
        self.port = free_port()
        self.ctx = ctx
        self.log_path = log_path
        self.args = [
            str(binary),
            *("--model", str(model), "--alias", ALIAS, "--host", "127.0.0.1"),
            *("--port", str(self.port), "-c", str(ctx), "-np", str(slots)),
            *("--jinja", "--chat-template-file", str(self.template)),
            *("--reasoning-format", "deepseek", "--cache-ram", str(cache_ram)),
            *("--cache-reuse", "0", "-t", "2", *(["--swa-full"] if swa_full else []), *extra),
            *(("--mmproj", str(vision_projector(_kind(vision)))) if vision else ()),
            # Trace level: the log then names every context checkpoint made and restored,
            # which is how a test shows why the server prefilled what it did.
            *("--log-verbosity", "4"),
        ]
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.root_url}/v1"

    def spawn(self) -> RealLlama:
        """Start the process without waiting for the model to load. From the main thread
        only: the death signal (PR_SET_PDEATHSIG) follows the thread that started the child,
        so a server started in a worker thread dies when that thread ends."""
        if threading.current_thread() is not threading.main_thread():
            raise RuntimeError("start the real llama-server from the main thread (a fixture)")
        log = self.log_path.open("ab")
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", EXEC_WITH_PARENT, str(os.getpid()), *self.args],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            log.close()
        return self

    def wait_healthy(self, timeout: float = 120.0) -> RealLlama:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited; see {self.log_path}")
            try:
                if httpx.get(f"{self.root_url}/health", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"llama-server did not start; see {self.log_path}")

    def start(self) -> RealLlama:
        return self.spawn().wait_healthy()

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    # ---- the server's own endpoints -----------------------------------------------------
    def post(self, path: str, body: dict[str, Any], timeout: float = 120.0) -> httpx.Response:
        return httpx.post(f"{self.root_url}{path}", json=body, timeout=timeout)

    def render(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        **kwargs: Any,
    ) -> str:
        body: dict[str, Any] = {"messages": messages, **kwargs}
        if tools:
            body["tools"] = tools
        r = self.post("/apply-template", body)
        r.raise_for_status()
        return r.json()["prompt"]

    def tokenize(self, text: str) -> list[int]:
        r = self.post("/tokenize", {"content": text, "add_special": True})
        r.raise_for_status()
        return r.json()["tokens"]

    def complete(
        self, prompt: str, slot: int | None = None, images: list[str] | None = None
    ) -> dict[str, Any]:
        """Evaluate ``prompt`` into a slot's cache (``slot``, or the one the server picks);
        returns the server's timings. ``images`` (base64, in order) fill the prompt's media
        markers, as a rendered chat request with image parts has them."""
        text: Any = {"prompt_string": prompt, "multimodal_data": images} if images else prompt
        body: dict[str, Any] = {"prompt": text, "n_predict": 0, "cache_prompt": True}
        if slot is not None:
            body["id_slot"] = slot
        r = self.post("/completion", body)
        r.raise_for_status()
        return r.json()["timings"]

    def props(self) -> dict[str, Any]:
        return httpx.get(f"{self.root_url}/props", timeout=10).json()
