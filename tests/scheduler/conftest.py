"""A real scheduler over a real SQLite file, a real Agent and the scripted LLM server.

``make_sched(...)`` builds the SchedulerService the app builds, on a :class:`ManualClock`
(nothing waits for real time) with its loop not started: a test moves the clock and calls
``tick()``. Deliveries go to a recording front-end registered like the REPL registers.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from luna.agent import Agent
from luna.agent.image_parts import StoredImages
from luna.attachments.intake import Intake
from luna.config import Config
from luna.llm import LLMClient
from luna.memory import Memory
from luna.scheduler.clock import ManualClock
from luna.scheduler.model import Delivery, Requester, Target, TaskRequest
from luna.scheduler.service import SchedulerService
from luna.scheduler.tool_port import ToolPort
from luna.tools.builtin import schedule
from tests.fakes.tools import echo_registry

START = dt.datetime(2026, 12, 1, 7, 0, tzinfo=dt.UTC)  # 08:00 in Berlin


@dataclass
class Sched:
    cfg: Config
    memory: Memory
    agent: Agent
    service: SchedulerService
    clock: ManualClock
    shown: list[Delivery] = field(default_factory=list)
    accept: bool = True  # the recording front-end: False = "could not show it now"

    @property
    def api(self) -> Any:
        return self.service.api

    async def deliver(self, d: Delivery) -> bool:
        if self.accept:
            self.shown.append(d)
        return self.accept

    def attach(self, frontend: str = "repl") -> None:
        self.service.router.register(frontend, self.deliver)

    async def tick(self, seconds: float = 0.0) -> Any:
        self.clock.advance(seconds)
        return await self.service.tick_once()

    async def add(self, text: str = "call the dentist", who: Requester | None = None, **kw: Any):
        return await self.api.add(TaskRequest(text, **kw), who or OWNER_REPL)

    def texts(self) -> list[str]:
        return [d.text for d in self.shown]


OWNER_REPL = Requester.owner("repl", Target("repl"), session_id="repl-asking")


@pytest.fixture
async def make_sched(
    luna_config: Callable[..., Config],
) -> AsyncIterator[Callable[..., Any]]:
    opened: list[tuple[SchedulerService, Memory, LLMClient]] = []

    async def make(
        scheduler: dict[str, Any] | None = None,
        *,
        timezone: str = "Europe/Berlin",
        start: dt.datetime = START,
        registry: Any = None,  # a ToolRegistry, or a function cfg -> ToolRegistry
        images: bool = False,  # the attachment store behind the agent's images, as the app has
        **sections: Any,
    ) -> Sched:
        data: dict[str, Any] = {
            "agent": {"timezone": timezone},
            "llm": {"max_retries": 0},
            "memory": {"librarian": False},
            "scheduler": {"retry_backoff": 60.0, **(scheduler or {})},
        }
        for key, value in sections.items():
            data[key] = {**data.get(key, {}), **value}
        cfg = luna_config(data)
        memory = Memory(cfg.memory)
        await memory.open(background=False, use_vectors=False)
        llm = LLMClient(cfg.llm)
        if registry is None:
            registry = echo_registry(cfg)
            schedule.register(registry, cfg)
        elif callable(registry):  # a factory: registry(cfg)
            registry = registry(cfg)
        held = None
        if images:
            intake = Intake(cfg)
            held = StoredImages(intake.images.load, intake.images.save)
        agent = Agent(cfg, llm, memory, registry, images=held)
        clock = ManualClock(start)
        service = SchedulerService(cfg, memory, agent, registry, clock=clock)
        registry.scheduler = ToolPort(service.api)
        opened.append((service, memory, llm))
        return Sched(cfg, memory, agent, service, clock)

    yield make
    for service, memory, llm in opened:
        await service.stop(grace=0)
        await llm.close()
        await memory.close()
