"""Luna's Discord front-end: the discord.py client, translated for the channel layer.

Job: :class:`LunaBot` is a ``discord.Client`` that turns Discord messages into the channel
layer's :class:`~luna.frontends.channels.contract.InboundEvent` s and reactions into approval
answers; :class:`~luna.frontends.discord.adapter.DiscordAdapter` carries the layer's calls
back. It contains no agent logic and none of the layer's rules.

Flow: ``on_message`` → :func:`~luna.frontends.discord.routing.decide` (Discord's places and
the layer's access rule) → the layer's duplicate check → (open a thread) →
:meth:`Channel.submit <luna.frontends.channels.channel.Channel.submit>` (bursts, one turn per
session, the streamed reply).

Invariants:
- Nothing raised while handling one message stops the bot (the layer's rule; ``on_message``
  logs what escapes it).
- A thread is opened only for a message admitted once: a replayed event opens none.
- A thread Luna opened, or answered in (``channels.following``: its session holds one of
  her answers, so a restart keeps it), is followed: a follow-up there needs no mention.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import re
from typing import TYPE_CHECKING

import discord

from luna.config import Config
from luna.config.secrets import discord_token_problem
from luna.errors import ConfigError, LunaError
from luna.frontends.channels.access import Speaker
from luna.frontends.channels.channel import Channel, ChannelSettings
from luna.frontends.channels.contract import InboundEvent
from luna.frontends.channels.delivery import ScheduledDelivery
from luna.frontends.channels.following import Following
from luna.frontends.channels.sending import attempt
from luna.frontends.discord.adapter import APPROVE, DENY, DiscordAdapter, incoming_file
from luna.frontends.discord.calls import call
from luna.frontends.discord.delivery import address_of
from luna.frontends.discord.routing import MessageFacts, access_of, decide
from luna.observe import log_event

if TYPE_CHECKING:
    from luna.agent import Agent
    from luna.attachments.intake import Intake
    from luna.frontends import Components
    from luna.memory import Memory
    from luna.scheduler.delivery import DeliveryRouter

log = logging.getLogger(__name__)

CLOSE_TIMEOUT = 10.0
THREAD_NAME_CHARS = 80


def make_intents() -> discord.Intents:
    """Message content, messages (guild + DM), guilds and members."""
    intents = discord.Intents.default()
    intents.message_content = True
    intents.messages = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.guilds = True
    intents.members = True
    intents.reactions = True
    return intents


def check(cfg: Config, mode: str = "auto") -> None:
    """A malformed DISCORD_TOKEN stops Luna with one line, before any network."""
    problem = discord_token_problem(cfg.discord.token)
    if problem:
        raise ConfigError(
            f"DISCORD_TOKEN is not a Discord bot token ({problem}); copy it from the "
            "Developer Portal (Bot → Reset Token), or unset it to use the terminal"
        )


class DiscordFrontend:
    """Runs the bot until ``stop``; replies in flight finish before it disconnects."""

    name = "discord"

    def __init__(self, bot: LunaBot, token: str, grace: float) -> None:
        self.bot = bot
        self.token = token
        self.grace = grace

    async def run(self, stop: asyncio.Event) -> None:
        client = asyncio.create_task(self.bot.start(self.token))
        stopper = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({client, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
        await self.bot.agent.drain(self.grace)  # running turns finish while we can reply
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.bot.close(), timeout=CLOSE_TIMEOUT)
        if client.done() and not client.cancelled() and client.exception() is not None:
            error = client.exception()
            log.error("the Discord bot stopped", exc_info=error)
            raise LunaError(f"the Discord bot stopped: {error}") from error
        client.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await client


def make(parts: Components, args: argparse.Namespace) -> DiscordFrontend:
    deliveries = parts.scheduler.router if parts.scheduler is not None else None
    bot = LunaBot(parts.cfg, parts.agent, parts.memory, parts.intake, deliveries=deliveries)
    return DiscordFrontend(bot, parts.cfg.discord.token, parts.cfg.agent.shutdown_grace)


class LunaBot(discord.Client):
    """The Discord client. ``await bot.start(token)`` runs it; ``await bot.close()`` stops it."""

    def __init__(
        self,
        cfg: Config,
        agent: Agent,
        memory: Memory,
        intake: Intake | None,  # None: files are refused
        *,
        deliveries: DeliveryRouter | None = None,
    ) -> None:
        super().__init__(intents=make_intents())
        self.cfg = cfg
        self.agent = agent
        self.memory = memory
        self.following = Following(memory.store)  # threads as their sessions
        self.adapter = DiscordAdapter(self, edit_interval=cfg.discord.edit_interval)
        settings = ChannelSettings(
            burst_window=cfg.discord.burst_window,
            max_attachment_bytes=cfg.discord.max_attachment_bytes,
            approval_timeout=cfg.tools.approval_timeout,
        )
        self.channel = Channel(self.adapter, agent, access_of(cfg.discord), settings, intake=intake)
        self.deliveries = deliveries  # None: the scheduler is off

    # ---- Discord events ----------------------------------------------------------------

    async def on_ready(self) -> None:
        user = self.user
        log.info("discord: logged in as %s (%s guilds)", user, len(self.guilds))
        log_event("discord_ready", user_id=str(user.id if user else ""), guilds=len(self.guilds))
        if self.deliveries is not None:  # connected: scheduled results can be sent now
            self.deliveries.register("discord", ScheduledDelivery(self.adapter))

    async def on_message(self, message: discord.Message) -> None:
        try:
            await self.handle_message(message)
        except Exception as e:  # one bad message must not stop the bot
            log.exception("discord: handling message %s failed", message.id)
            log_event("channel_error", frontend="discord", op="on_message", error=type(e).__name__)

    async def on_raw_reaction_add(self, payload: discord.RawReactionActionEvent) -> None:
        """A ✅ or ❌ on an approval prompt, handed to the layer (which counts the owner's)."""
        emoji = str(payload.emoji)
        if emoji not in (APPROVE, DENY) or (self.user and payload.user_id == self.user.id):
            return
        self.channel.approvals.answer(
            str(payload.message_id), str(payload.user_id), emoji == APPROVE
        )

    async def close(self) -> None:
        if self.deliveries is not None:
            self.deliveries.unregister("discord")
        try:
            await self.channel.aclose()
        finally:
            await self.adapter.aclose()  # the downloads' client
            await super().close()

    # ---- routing -----------------------------------------------------------------------

    async def facts(self, message: discord.Message) -> MessageFacts:
        """Extract what :func:`decide` needs from a discord.py message."""
        me = self.user
        bot_id = me.id if me else 0
        channel = message.channel
        is_thread = isinstance(channel, discord.Thread)
        mentioned = any(u.id == bot_id for u in message.mentions) or bool(
            re.search(rf"<@!?{bot_id}>", message.content or "")
        )
        known = is_thread and (
            getattr(channel, "owner_id", None) == bot_id
            or (not mentioned and await self.following.follows(f"thread-{channel.id}"))
        )  # a mention is heard anyway: no await, so it is followed before the next message
        return MessageFacts(
            author_id=message.author.id,
            author_is_bot=bool(message.author.bot),
            bot_id=bot_id,
            content=message.content or "",
            is_dm=message.guild is None,
            guild_id=message.guild.id if message.guild else None,
            channel_id=channel.id,
            thread_parent_id=channel.parent_id if isinstance(channel, discord.Thread) else None,
            mentions_bot=mentioned,
            known_thread=known,
        )

    async def handle_message(self, message: discord.Message) -> None:
        """Route one message and hand it to the channel layer (or drop it)."""
        if self.user is None or message.author.id == self.user.id:
            return
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return  # joins, pins, thread-created notices...
        route = decide(await self.facts(message), self.cfg.discord)
        if route is None:
            return
        if not self.channel.admit(str(message.id)):
            return
        if not route.text and not message.attachments:
            return
        channel: discord.abc.Messageable = message.channel
        session_id = route.session_id
        if route.open_thread:
            thread = await self.open_thread(message, route.text)
            if thread is not None:
                channel, session_id = thread, f"thread-{thread.id}"
            else:
                session_id = f"ch-{message.channel.id}-{message.author.id}"
        if route.remember_thread:
            self.following.follow(f"thread-{message.channel.id}")
        is_dm = message.guild is None
        event = InboundEvent(
            message_id=str(message.id),
            author_id=route.user_id,
            author_is_bot=False,
            conversation=channel,
            session_id=session_id,
            text=route.text,
            is_private=is_dm,
            addressed=True,
            address=address_of(channel, route.user_id, is_dm),
            files=tuple(incoming_file(a, self.adapter.downloads) for a in message.attachments),
        )
        speaker = Speaker(route.user_id, route.scope, route.allow_tools, route.scope == "owner")
        self.channel.submit(event, speaker)

    async def open_thread(self, message: discord.Message, text: str) -> discord.Thread | None:
        """Open a thread on ``message``; None (answer in the channel) when Discord refuses."""
        name = " ".join(text.split())[:THREAD_NAME_CHARS] or "Luna"
        thread = await attempt(
            "discord", "create_thread", lambda: call(message.create_thread(name=name))
        )
        if thread is not None:
            self.following.follow(f"thread-{thread.id}")
        return thread
