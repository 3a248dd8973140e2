"""Harness: the real LunaBot + real Agent (scripted LLM server, SQLite Memory) under dpytest.

dpytest (discord.ext.test) plays Discord's server side in-process. It has no thread support,
so :func:`_fake_start_thread` teaches its fake HTTP client ``start_thread_with_message`` the
way Discord answers it (a thread object, dispatched as THREAD_CREATE). That extends the
third-party fake; nothing of Luna is replaced.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import discord
import discord.ext.test as dpytest
import pytest
from discord.ext.test import backend, callbacks, factories

from luna.agent import Agent
from luna.agent.image_parts import StoredImages
from luna.attachments.intake import Intake
from luna.config import Config
from luna.frontends.channels.pipeline import Batch, SessionPipeline
from luna.frontends.discord.bot import LunaBot
from luna.llm import LLMClient
from luna.memory import Memory
from luna.memory.embedding.embeddings import Embedder
from luna.tools.registry import ToolRegistry
from tests.fakes.file_host import FileHost
from tests.fakes.tools import echo_registry

OWNER_ID = 111_111_111_111_111_111
FRIEND_ID = 222_222_222_222_222_222
STRANGER_ID = 333_333_333_333_333_333
_EMBEDDERS: dict[tuple[str, int], Embedder] = {}  # one real model load per test process


async def _fake_start_thread(
    self: backend.FakeHttp,
    channel_id: int,
    message_id: int,
    *,
    name: str,
    auto_archive_duration: int = 1440,
    rate_limit_per_user: int | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    state = backend.get_state()
    channel = state.get_channel(channel_id)
    data = {
        "id": factories.make_id(),
        "guild_id": channel.guild.id,
        "parent_id": channel_id,
        "owner_id": state.user.id,
        "name": name,
        "type": discord.ChannelType.public_thread.value,
        "message_count": 0,
        "member_count": 1,
        "rate_limit_per_user": rate_limit_per_user or 0,
        "thread_metadata": {
            "archived": False,
            "auto_archive_duration": auto_archive_duration,
            "archive_timestamp": dt.datetime.now(dt.UTC).isoformat(),
            "locked": False,
        },
    }
    state.parse_thread_create(data)
    return data


def _patch_reaction_payloads(state: Any) -> None:
    """dpytest 0.7 omits ``type`` from reaction events, which discord.py 2.7 requires."""
    for name in ("parse_message_reaction_add", "parse_message_reaction_remove"):
        original = getattr(state, name)

        def parse(data: dict[str, Any], _original: Any = original) -> Any:
            data.setdefault("type", 0)
            data.setdefault("burst", False)
            return _original(data)

        setattr(state, name, parse)


def tools_registry(cfg: Config) -> ToolRegistry:
    registry = echo_registry(cfg)

    @registry.tool(level="ask")
    async def launch(target: str) -> str:
        """A tool that needs the owner's approval.

        Args:
            target: what to launch
        """
        return f"launched {target}"

    return registry


class TurnCounter:
    """Counts the turns the bot's pipeline runs, by wrapping the handler the pipeline is given.

    The pipeline and the bot's ``run_batch`` are the real ones; this only sees each turn start
    and end, so a test can wait for the turns it expects instead of sleeping.
    """

    def __init__(self) -> None:
        self.running = 0
        self.finished = 0
        self._changed = asyncio.Event()

    def wrap(self, handler: Callable[[Batch], Awaitable[None]]) -> Callable[[Batch], Any]:
        async def counted(batch: Batch) -> None:
            self.running += 1
            try:
                await handler(batch)
            finally:
                self.running -= 1
                self.finished += 1
                self._changed.set()

        return counted

    async def wait_for(self, total: int) -> None:
        """Until ``total`` turns have finished and none is running."""
        while self.finished < total or self.running:
            self._changed.clear()
            await self._changed.wait()


@dataclass
class Harness:
    bot: LunaBot
    agent: Agent
    memory: Memory
    cfg: Config
    guild: discord.Guild
    channel: discord.TextChannel
    owner: discord.Member
    friend: discord.Member
    stranger: discord.Member
    turns: TurnCounter = field(default_factory=TurnCounter)
    expected_turns: int = 0
    edits: list[tuple[int, str]] = field(default_factory=list)  # (message id, new content)
    typing: list[int] = field(default_factory=list)  # channel ids

    async def say(self, content: str, member: discord.Member, channel: Any = None, **kw: Any):
        """A user posts a message; returns it once on_message has run."""
        return await dpytest.message(content, channel=channel or self.channel, member=member, **kw)

    async def settle(self, turns: int = 1) -> None:
        """Wait until ``turns`` more turns have run to the end, and check no other one ran.

        A turn admitted by mistake (a replay, a stranger) shows up as one turn too many: a
        same-session turn starts before the waiter wakes, another session's even earlier.
        """
        await dpytest.run_all_events()
        self.expected_turns += turns
        await asyncio.wait_for(self.turns.wait_for(self.expected_turns), timeout=30)
        await dpytest.run_all_events()
        assert self.turns.finished == self.expected_turns, (
            f"{self.turns.finished} turns ran, {self.expected_turns} expected"
        )

    def bot_messages(self, channel: Any) -> list[dict[str, Any]]:
        """The bot's messages in a channel, as dpytest stores them (content after edits)."""
        me = self.bot.user.id
        stored = backend._cur_config.messages.get(channel.id, [])
        return [m for m in stored if int(m["author"]["id"]) == me]

    def mention(self) -> str:
        return f"<@{self.bot.user.id}>"

    async def dm_channel(self, member: discord.Member) -> discord.DMChannel:
        return await member.create_dm()


@pytest.fixture
async def cdn() -> AsyncIterator[FileHost]:
    """A loopback stand-in for Discord's CDN, where a test's attachments are downloaded."""
    host = await FileHost().start()
    yield host
    await host.stop()


@pytest.fixture
async def make_harness(
    luna_config: Callable[..., Config], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Callable[..., Any]]:
    monkeypatch.setattr(
        backend.FakeHttp, "start_thread_with_message", _fake_start_thread, raising=False
    )
    opened: list[tuple[LunaBot, Memory, LLMClient]] = []

    async def make(discord_cfg: dict[str, Any] | None = None, **sections: Any) -> Harness:
        dcfg = {"owner_id": OWNER_ID, "allowed_users": [FRIEND_ID], "burst_window": 0.0}
        dcfg.update(discord_cfg or {})
        data: dict[str, Any] = {"discord": dcfg, "llm": {"max_retries": 0}}
        data.update(sections)
        cfg = luna_config(data)
        memory = Memory(cfg.memory)
        key = (cfg.memory.embedding_model, cfg.memory.embedding_dim)
        memory.embedder = _EMBEDDERS.setdefault(key, memory.embedder)
        # The process's first load of the model (long on a busy box) happens here, outside the
        # time limits a test sets for its turns (as the web harness does).
        await asyncio.to_thread(memory.embedder.load)
        await memory.open(background=False)
        llm = LLMClient(cfg.llm)
        intake = Intake(cfg)  # files, and the images the agent shows, as the app builds them
        images = StoredImages(intake.images.load, intake.images.save)
        agent = Agent(cfg, llm, memory, tools_registry(cfg), images=images)
        bot = LunaBot(cfg, agent, memory, intake)
        turns = TurnCounter()
        bot.channel.pipeline = SessionPipeline(
            turns.wrap(bot.channel.run_batch), burst_window=cfg.discord.burst_window
        )
        opened.append((bot, memory, llm))
        await bot._async_setup_hook()  # dpytest: binds the client to the running loop
        dpytest.configure(bot, members=0)
        _patch_reaction_payloads(backend.get_state())
        config = dpytest.get_config()
        guild, channel = config.guilds[0], config.channels[0]
        members = {}
        for name, uid in (("owner", OWNER_ID), ("friend", FRIEND_ID), ("stranger", STRANGER_ID)):
            user = backend.make_user(name, "0001", id_num=uid)
            members[name] = backend.make_member(user, guild)
        h = Harness(bot, agent, memory, cfg, guild, channel, **members, turns=turns)

        async def on_edit(chan: Any, message: discord.Message, fields: Any) -> None:
            payload = fields["params"].payload or {}
            if "content" in payload:
                h.edits.append((message.id, payload["content"]))

        async def on_typing(chan: Any) -> None:
            h.typing.append(chan.id)

        callbacks.set_callback(on_edit, "edit_message")
        callbacks.set_callback(on_typing, "send_typing")
        await dpytest.empty_queue()
        return h

    yield make
    for bot, memory, llm in opened:
        await bot.agent.drain(0)  # the image describer's background work stops too
        await bot.channel.aclose()
        await llm.close()
        await memory.close()
    callbacks.remove_callback("edit_message")
    callbacks.remove_callback("send_typing")
    await dpytest.empty_queue()
