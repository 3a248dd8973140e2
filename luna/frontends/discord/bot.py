"""Luna's Discord front-end: routing, the message pipeline, replies and approvals.

Job: :class:`LunaBot` is a ``discord.Client`` that turns Discord messages into
:class:`~luna.messages.InboundMessage` s for ``agent.run_turn`` and renders the events back
into Discord. It contains no agent logic.

Flow: ``on_message`` → :func:`luna.discord_routing.decide` (who/where/which rights) →
duplicate check → (open a thread) → :class:`~luna.discord_pipeline.SessionPipeline` (burst
merge, per-session queue) → :meth:`LunaBot.run_batch` (attachments, typing indicator,
``run_turn``) → :class:`~luna.discord_reply.ReplyStream` (edits, status line, split).

Invariants:
- Nothing raised while handling one message stops the bot: Discord HTTP errors are logged;
  a crashed turn shows the user one short line and logs the traceback; CancelledError
  propagates.
- Only the owner's reaction approves an ``ask`` tool; strangers get no tools and no approver.
- Attachment text is read only for text files no larger than ``discord.max_attachment_bytes``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

import discord

from luna.config import Config
from luna.config.secrets import discord_token_problem
from luna.errors import ConfigError, LunaError
from luna.frontends.discord import delivery as scheduled
from luna.frontends.discord.approval import ReactionApprover
from luna.frontends.discord.pipeline import Batch, Incoming, SessionPipeline
from luna.frontends.discord.reply import HTTP_TIMEOUT, ReplyStream, safe_call, short_line
from luna.frontends.discord.routing import MessageFacts, Route, decide
from luna.messages import InboundMessage
from luna.observe import log_event

if TYPE_CHECKING:
    from luna.agent import Agent
    from luna.memory import Memory

log = logging.getLogger(__name__)

CLOSE_TIMEOUT = 10.0
TYPING_EVERY = 8.0  # Discord shows "typing" for ~10 s per trigger
THREAD_NAME_CHARS = 80
GENERIC_FAILURE = "Something went wrong on my side; the details are in the log."
TEXT_EXTENSIONS = frozenset(
    ".txt .md .markdown .rst .py .pyi .json .jsonl .yaml .yml .toml .ini .cfg .conf .csv .tsv "
    ".log .sh .bash .zsh .fish .js .ts .tsx .jsx .html .htm .css .xml .sql .rs .go .c .h .cc "
    ".cpp .hpp .java .kt .rb .php .lua .pl .r .swift .diff .patch .env.example .service "
    ".dockerfile .tex .srt .vtt".split()
)


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


def is_text_attachment(att: discord.Attachment) -> bool:
    content_type = (att.content_type or "").split(";")[0].strip().lower()
    if content_type.startswith("text/") or content_type in ("application/json", "application/xml"):
        return True
    suffix = PurePath(att.filename).suffix.lower()
    return suffix in TEXT_EXTENSIONS


async def read_attachments(messages: list[discord.Message], cap: int) -> str:
    """The text attachments of ``messages`` as blocks to append to the user's text."""
    parts: list[str] = []
    for message in messages:
        for att in message.attachments:
            if not is_text_attachment(att):
                parts.append(f"[attachment {att.filename}: not a text file, not read]")
                continue
            if att.size > cap:
                parts.append(f"[attachment {att.filename}: {att.size} bytes > {cap}, not read]")
                continue
            try:
                data = await asyncio.wait_for(att.read(), HTTP_TIMEOUT)
            except (discord.HTTPException, TimeoutError) as e:
                log_event("discord_error", op="read_attachment", error=type(e).__name__)
                parts.append(f"[attachment {att.filename}: could not be downloaded]")
                continue
            if len(data) > cap:
                parts.append(f"[attachment {att.filename}: {len(data)} bytes > {cap}, not read]")
                continue
            text = data.decode("utf-8", errors="replace").replace("```", "`\u200b``")
            parts.append(f"[attachment {att.filename}]\n```\n{text}\n```")
    return "\n\n".join(parts)


@dataclass
class Job:
    """One accepted Discord message waiting in the pipeline."""

    message: discord.Message
    route: Route
    channel: discord.abc.Messageable  # where to answer (the new thread, if one was opened)
    text: str


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


def make(parts: Any, args: Any) -> DiscordFrontend:
    bot = LunaBot(
        parts.cfg, parts.agent, parts.memory, deliveries=getattr(parts.scheduler, "router", None)
    )
    return DiscordFrontend(bot, parts.cfg.discord.token, parts.cfg.agent.shutdown_grace)


class LunaBot(discord.Client):
    """The Discord client. ``await bot.start(token)`` runs it; ``await bot.close()`` stops it."""

    def __init__(
        self, cfg: Config, agent: Agent, memory: Memory, *, deliveries: Any = None
    ) -> None:
        super().__init__(intents=make_intents())
        self.cfg = cfg
        self.agent = agent
        self.memory = memory
        self.known_threads: set[int] = set()
        self.pipeline = SessionPipeline(self.run_batch, burst_window=cfg.discord.burst_window)
        self.deliveries = deliveries  # luna.scheduler.delivery.DeliveryRouter, or None

    # ---- Discord events ----------------------------------------------------------------

    async def on_ready(self) -> None:
        user = self.user
        log.info("discord: logged in as %s (%s guilds)", user, len(self.guilds))
        log_event("discord_ready", user_id=str(user.id if user else ""), guilds=len(self.guilds))
        if self.deliveries is not None:  # connected: scheduled results can be sent now
            self.deliveries.register("discord", self.deliver_scheduled)

    async def deliver_scheduled(self, delivery: Any) -> bool:
        """Send a scheduled task's result where the task was asked for."""
        return await scheduled.deliver(self, delivery.target.address, delivery.text)

    async def on_message(self, message: discord.Message) -> None:
        try:
            await self.handle_message(message)
        except Exception as e:  # one bad message must not stop the bot
            log.exception("discord: handling message %s failed", message.id)
            log_event("discord_error", op="on_message", error=type(e).__name__)

    async def close(self) -> None:
        if self.deliveries is not None:
            self.deliveries.unregister("discord")
        await self.pipeline.aclose()
        await super().close()

    # ---- routing -----------------------------------------------------------------------

    def facts(self, message: discord.Message) -> MessageFacts:
        """Extract what :func:`decide` needs from a discord.py message."""
        me = self.user
        bot_id = me.id if me else 0
        channel = message.channel
        is_thread = isinstance(channel, discord.Thread)
        mentioned = any(u.id == bot_id for u in message.mentions) or bool(
            re.search(rf"<@!?{bot_id}>", message.content or "")
        )
        known = is_thread and (
            channel.id in self.known_threads or getattr(channel, "owner_id", None) == bot_id
        )
        return MessageFacts(
            author_id=message.author.id,
            author_is_bot=bool(message.author.bot),
            bot_id=bot_id,
            content=message.content or "",
            is_dm=message.guild is None,
            guild_id=message.guild.id if message.guild else None,
            channel_id=channel.id,
            thread_parent_id=channel.parent_id if is_thread else None,
            mentions_bot=mentioned,
            known_thread=known,
        )

    async def handle_message(self, message: discord.Message) -> None:
        """Route one message and hand it to the pipeline (or drop it)."""
        if self.user is None or message.author.id == self.user.id:
            return
        if message.type not in (discord.MessageType.default, discord.MessageType.reply):
            return  # joins, pins, thread-created notices...
        route = decide(self.facts(message), self.cfg.discord)
        if route is None:
            return
        if not self.pipeline.admit(message.id):
            log_event("discord_duplicate", message_id=str(message.id))
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
            self.known_threads.add(message.channel.id)
        log_event("discord_message", session=session_id, message_id=str(message.id))
        job = Job(message=message, route=route, channel=channel, text=route.text)
        self.pipeline.submit(Incoming(message.id, session_id, message.author.id, job))

    async def open_thread(self, message: discord.Message, text: str) -> discord.Thread | None:
        """Open a thread on ``message``; None (answer in the channel) when Discord refuses."""
        name = " ".join(text.split())[:THREAD_NAME_CHARS] or "Luna"
        thread = await safe_call("create_thread", message.create_thread(name=name))
        if thread is not None:
            self.known_threads.add(thread.id)
        return thread

    # ---- one turn ----------------------------------------------------------------------

    async def run_batch(self, batch: Batch) -> None:
        """Run one turn for a burst of messages and render it."""
        jobs: list[Job] = [item.payload for item in batch.items]
        first = jobs[0]
        route, channel = first.route, first.channel
        text = "\n".join(j.text for j in jobs if j.text)
        attached = await read_attachments(
            [j.message for j in jobs], self.cfg.discord.max_attachment_bytes
        )
        if attached:
            text = f"{text}\n\n{attached}" if text else attached
        approver = None
        if route.allow_tools:
            approver = ReactionApprover(
                self,
                channel,
                owner_id=self.cfg.discord.owner_id,
                timeout=self.cfg.tools.approval_timeout,
            )
        inbound = InboundMessage(
            session_id=batch.session_id,
            text=text,
            frontend="discord",
            user_id=route.user_id,
            scope=route.scope,
            allow_tools=route.allow_tools,
            approver=approver,
            address=scheduled.address_of(channel, route.user_id, first.message.guild is None),
        )
        stream = ReplyStream(channel, edit_interval=self.cfg.discord.edit_interval)
        typing = asyncio.get_running_loop().create_task(self.keep_typing(channel))
        try:
            async for event in self.agent.run_turn(inbound):
                await stream.feed(event)
        except LunaError as e:
            log.exception("discord: turn failed in %s", batch.session_id)
            log_event("discord_error", op="turn", session=batch.session_id, error=type(e).__name__)
            stream.fail(short_line(str(e)) or GENERIC_FAILURE)
        except Exception as e:  # a code bug: the log gets the traceback
            log.exception("discord: turn crashed in %s", batch.session_id)
            log_event("discord_error", op="turn", session=batch.session_id, error=type(e).__name__)
            stream.fail(GENERIC_FAILURE)
        finally:
            typing.cancel()
            await asyncio.gather(typing, return_exceptions=True)
        await stream.finish()

    async def keep_typing(self, channel: discord.abc.Messageable) -> None:
        """Show the typing indicator until cancelled."""
        while True:
            await safe_call("typing", channel.typing())
            await asyncio.sleep(TYPING_EVERY)
