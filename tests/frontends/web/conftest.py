"""Harness: the real web front-end, in this process, over real HTTP on 127.0.0.1.

``web_luna(data)`` builds Luna's real parts (SQLite Memory, LLMClient against the scripted
server, an Agent, a ToolRegistry with a few test tools) and starts ``WebFrontend`` on a free
port, exactly as ``app`` would; the test talks to it with a real HTTP client. Nothing of Luna
is replaced.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from luna import observe
from luna.agent import Agent
from luna.agent.image_parts import StoredImages
from luna.attachments.intake import Intake
from luna.config import Config, secret_values
from luna.frontends import Components
from luna.frontends.web import WebFrontend
from luna.llm import LLMClient
from luna.llm.transport import shared_tls
from luna.memory import Memory
from luna.memory.embedding.embeddings import Embedder
from luna.scheduler.clock import ManualClock
from luna.scheduler.service import SchedulerService
from luna.scheduler.tool_port import ToolPort
from luna.tools.builtin import schedule
from luna.tools.registry import ToolRegistry
from tests.fakes.tools import echo_registry

TOKEN = "test-web-token-0123456789abcdef"
START = dt.datetime(2026, 12, 1, 7, 0, tzinfo=dt.UTC)
XSS = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2">'
_EMBEDDERS: dict[tuple[str, int], Embedder] = {}  # one real model load per test process


def web_registry(cfg: Config) -> ToolRegistry:
    """``echo`` (allow), ``risky`` (ask: needs an approval), ``html_page`` (allow: returns an
    XSS payload, as a hostile web page would)."""
    registry = echo_registry(cfg)

    @registry.tool(level="ask")
    async def risky(text: str) -> str:
        """Do something that needs the owner's approval.

        Args:
            text: what to do
        """
        return f"risky done: {text}"

    @registry.tool(level="allow")
    async def html_page() -> str:
        """Fetch a page full of markup."""
        return f"page says {XSS}"

    return registry


@dataclass
class WebLuna:
    frontend: WebFrontend
    url: str
    cfg: Config
    memory: Memory
    agent: Agent
    scheduler: SchedulerService | None = None

    def client(self, *, token: str | None = TOKEN, **kwargs: Any) -> httpx.AsyncClient:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        headers.update(kwargs.pop("headers", {}))
        # The page's address is plain http; one shared TLS context spares each client
        # loading the CA bundle (30-40 ms).
        return httpx.AsyncClient(
            base_url=self.url, headers=headers, timeout=30, verify=shared_tls(), **kwargs
        )


@pytest.fixture(autouse=True)
def _no_web_token(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("LUNA_WEB_TOKEN", raising=False)
    # A config built without a file makes `config set` write $LUNA_CONFIG or ./config.toml:
    # never the repository's.
    monkeypatch.setenv("LUNA_CONFIG", str(tmp_path / "config.toml"))


@pytest.fixture
async def web_luna(luna_config: Callable[..., Config]) -> AsyncIterator[Callable[..., Any]]:
    started: list[tuple[WebFrontend, asyncio.Event, asyncio.Task[None], Memory, LLMClient]] = []

    async def make(
        data: dict | None = None, *, scheduler: bool = False, env: dict[str, str] | None = None
    ) -> WebLuna:
        base = {
            "web": {"enabled": True, "port": 0, "failure_delay": 0.01},
            "memory": {"embedding_process": False},
            "tools": {"approval_timeout": 5.0},
        }
        for key, value in (data or {}).items():
            base[key] = {**base.get(key, {}), **value}
        cfg = luna_config(base, env={"LUNA_WEB_TOKEN": TOKEN, **(env or {})})
        observe.setup(cfg.observe.log_dir, console=False, secrets=secret_values(cfg))
        memory = Memory(cfg.memory)
        key = (cfg.memory.embedding_model, cfg.memory.embedding_dim)
        memory.embedder = _EMBEDDERS.setdefault(key, memory.embedder)
        # The first load of a process exports the model to ONNX (half a minute on a busy
        # machine): done here, outside the time limits a test sets for its own requests.
        await asyncio.to_thread(memory.embedder.load)
        await memory.open(background=False)
        llm = LLMClient(cfg.llm)
        registry = web_registry(cfg)
        intake = Intake(cfg)
        images = StoredImages(intake.images.load, intake.images.save)
        agent = Agent(cfg, llm, memory, registry, images=images)
        service = None
        if scheduler:  # the app's scheduler on a hand-moved clock (tests call tick_once)
            schedule.register(registry, cfg)
            service = SchedulerService(cfg, memory, agent, registry, clock=ManualClock(START))
            registry.scheduler = ToolPort(service.api)
        parts = Components(
            cfg, agent, memory, llm, registry, None, scheduler=service, intake=intake
        )
        frontend = WebFrontend(parts, announce=False)
        stop = asyncio.Event()
        task = asyncio.create_task(frontend.run(stop))
        for _ in range(200):
            if frontend.url:
                break
            await asyncio.sleep(0.01)
        started.append((frontend, stop, task, memory, llm))
        return WebLuna(frontend, frontend.url, cfg, memory, agent, service)

    yield make
    for _frontend, stop, task, memory, llm in started:
        stop.set()
        await asyncio.wait_for(task, 30)
        await llm.close()
        await memory.close()
    observe.shutdown()
