"""Harness: the real TelegramFrontend + real Agent (scripted LLM server, SQLite Memory) against
the loopback Bot API server (tests/fakes/telegram_server.py), over real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from luna.agent import Agent
from luna.agent.image_parts import StoredImages
from luna.attachments.intake import Intake
from luna.config import Config
from luna.frontends.telegram.frontend import TelegramFrontend
from luna.llm import LLMClient
from luna.memory import Memory
from luna.scheduler.service import SchedulerService
from luna.scheduler.tool_port import ToolPort
from luna.tools.builtin import schedule
from tests.fakes.telegram_server import TOKEN, FakeTelegram
from tests.frontends.discord.conftest import tools_registry

OWNER = 5001
FRIEND = 5002
STRANGER = 5003
GROUP = {"id": -1001234, "type": "supergroup", "title": "Home"}
FORUM = {"id": -1005678, "type": "supergroup", "title": "Lab", "is_forum": True}


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    with FakeTelegram() as server:
        yield server


@dataclass
class Running:
    frontend: TelegramFrontend
    agent: Agent
    memory: Memory
    cfg: Config
    stop: asyncio.Event
    task: asyncio.Task[None]
    scheduler: SchedulerService | None = None

    async def history(self, session_id: str, *, length: int = 0) -> list[tuple[str, str]]:
        """The session's log as (role, content); with ``length``, once it is that long."""
        for _ in range(1500):
            _summary, records = await self.memory.prompt_history(session_id)
            if len(records) >= length:
                break
            await asyncio.sleep(0.02)
        return [(r.role, r.content) for r in records]


def telegram_section(server: FakeTelegram, **extra: Any) -> dict[str, Any]:
    section = {
        "base_url": server.url,
        "owner_id": OWNER,
        "allowed_users": [FRIEND],
        "burst_window": 0.0,
        "edit_interval": 0.2,
        "poll_timeout": 1,
        "request_timeout": 5.0,
        "retry_backoff": 0.01,
    }
    section.update(extra)
    return section


@pytest.fixture
async def start_luna(
    luna_config: Callable[..., Config], telegram: FakeTelegram
) -> AsyncIterator[Callable[..., Any]]:
    """Factory: ``await start_luna(telegram={...}, **sections)`` runs the front-end."""
    running: list[tuple[Running, LLMClient]] = []

    async def start(
        telegram_cfg: dict[str, Any] | None = None,
        *,
        clock: Any = None,
        token: str = TOKEN,
        **sections: Any,
    ) -> Running:
        data: dict[str, Any] = {"telegram": telegram_section(telegram, **(telegram_cfg or {}))}
        data.setdefault("llm", {"max_retries": 0})
        data.update(sections)
        cfg = luna_config(data, env={"TELEGRAM_TOKEN": token})
        memory = Memory(cfg.memory)
        await memory.open(background=False, use_vectors=False)  # keyword recall: no model load
        llm = LLMClient(cfg.llm)
        intake = Intake(cfg)  # files, and the images the agent shows, as the app builds them
        images = StoredImages(intake.images.load, intake.images.save)
        agent = Agent(cfg, llm, memory, tools_registry(cfg), images=images)
        scheduler = None
        if clock is not None:  # the scheduler app builds, on a hand-moved clock
            schedule.register(agent.registry, cfg)
            scheduler = SchedulerService(cfg, memory, agent, agent.registry, clock=clock)
            agent.registry.scheduler = ToolPort(scheduler.api)
        frontend = TelegramFrontend(cfg, agent, memory, intake, scheduler and scheduler.router)
        stop = asyncio.Event()
        task = asyncio.create_task(frontend.run(stop))
        await telegram.wait_for(lambda: telegram.called("getMe"), within=20)
        r = Running(frontend, agent, memory, cfg, stop, task, scheduler)
        running.append((r, llm))
        return r

    yield start
    for r, llm in running:
        if r.scheduler is not None:
            await r.scheduler.stop(grace=0)
        r.stop.set()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(r.task, 30)
        await llm.close()
        await r.memory.close()
