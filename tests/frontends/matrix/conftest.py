"""Harness: one real Synapse for every Matrix test; per test, fresh accounts and a real Luna.

Luna is the real thing in-process: Memory on SQLite in ``tmp_path``, the Agent with the
scripted LLM server, and the Matrix front-end logged in to Synapse as the bot. "Restarting
Luna" stops all of it and builds it again on the same data folder. The owner and the stranger
are real mautrix clients with their own Olm devices (``person.py``).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from luna.agent import Agent
from luna.agent.image_parts import StoredImages
from luna.attachments.intake import Intake
from luna.config import Config
from luna.frontends.matrix.frontend import MatrixFrontend
from luna.llm import LLMClient
from luna.memory import Memory
from luna.scheduler.service import SchedulerService
from luna.scheduler.tool_port import ToolPort
from luna.tools.builtin import schedule
from tests.fakes.llm_server import FakeLLMServer
from tests.frontends.discord.conftest import tools_registry
from tests.frontends.matrix.person import Person
from tests.frontends.matrix.synapse import Account, Synapse

_names = itertools.count(1)


@pytest.fixture(scope="session")
def synapse(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Synapse]:
    server = Synapse(tmp_path_factory.mktemp("synapse")).start()
    yield server
    server.stop()


@dataclass
class Luna:
    frontend: MatrixFrontend
    memory: Memory
    llm: LLMClient
    stop: asyncio.Event
    task: asyncio.Task[None]
    scheduler: SchedulerService | None = None

    async def close(self) -> None:
        if self.scheduler is not None:
            await self.scheduler.stop(grace=0)
        self.stop.set()
        await asyncio.wait_for(self.task, 60)
        await self.llm.close()
        await self.memory.close()


@dataclass
class World:
    synapse: Synapse
    llm_server: FakeLLMServer
    bot: Account
    owner: Person
    stranger: Person
    make_config: Callable[..., Config]
    matrix: dict[str, Any] = field(default_factory=dict)
    luna: Luna | None = None

    async def start_luna(
        self, *, clock: Any = None, agent: dict[str, Any] | None = None, **matrix: Any
    ) -> Luna:
        """Luna on the data folder (the scheduler too, on ``clock``, when one is given;
        ``agent``: settings of the ``[agent]`` section)."""
        m = {
            "homeserver": self.synapse.url,
            "user_id": self.bot.user_id,
            "owner": self.owner.user_id,
            "edit_interval": 0.2,
            "burst_window": 0.2,
            "request_timeout": 10.0,
        }
        m.update(self.matrix | matrix)
        cfg = self.make_config(
            {"matrix": m, "llm": {"max_retries": 0}, "agent": agent or {}},
            env={"MATRIX_ACCESS_TOKEN": self.bot.access_token},
        )
        memory = Memory(cfg.memory)
        await memory.open(background=False, use_vectors=False)  # keyword recall: no model load
        llm = LLMClient(cfg.llm)
        intake = Intake(cfg)  # files, and the images the agent shows, as the app builds them
        images = StoredImages(intake.images.load, intake.images.save)
        agent = Agent(cfg, llm, memory, tools_registry(cfg), images=images)  # echo, launch
        scheduler = None
        if clock is not None:  # the scheduler as the app builds it, on a hand-moved clock
            schedule.register(agent.registry, cfg)
            scheduler = SchedulerService(cfg, memory, agent, agent.registry, clock=clock)
            agent.registry.scheduler = ToolPort(scheduler.api)
        frontend = MatrixFrontend(cfg, agent, memory, intake, scheduler and scheduler.router)
        stop = asyncio.Event()
        task = asyncio.get_running_loop().create_task(frontend.run(stop))
        ready = asyncio.ensure_future(frontend.ready.wait())
        await asyncio.wait({task, ready}, timeout=60, return_when=asyncio.FIRST_COMPLETED)
        if task.done():
            task.result()  # raises why it stopped
        self.luna = Luna(frontend, memory, llm, stop, task, scheduler)
        return self.luna

    async def stop_luna(self) -> None:
        if self.luna is not None:
            luna, self.luna = self.luna, None
            await luna.close()


@pytest.fixture
async def world(
    synapse: Synapse,
    llm_server: FakeLLMServer,
    luna_config: Callable[..., Config],
    tmp_path: Path,
) -> AsyncIterator[World]:
    n = next(_names)
    bot = synapse.register(f"luna{n}", limited=True)
    synapse.unlimit(bot.user_id)  # the rate-limit test puts the limit back
    owner = await Person(synapse.register(f"owner{n}"), synapse.url, tmp_path / "owner").start()
    stranger = await Person(
        synapse.register(f"stranger{n}"), synapse.url, tmp_path / "stranger"
    ).start()
    w = World(synapse, llm_server, bot, owner, stranger, luna_config)
    try:
        yield w
    finally:
        await w.stop_luna()
        await owner.stop()
        await stranger.stop()
