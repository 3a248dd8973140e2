"""Luna's Telegram front-end: the bot's lifecycle around the channel layer.

Job: :class:`TelegramFrontend` keeps the front-end contract (``luna/frontends/__init__.py``):
it logs in (getMe, retried while Telegram is unreachable), finishes turns a dead process left
unanswered, then reads updates by long polling (the default) or a webhook until ``stop``;
messages go to the channel layer, button presses to its approvals. :func:`check` refuses a
malformed ``TELEGRAM_TOKEN``.

Invariants:
- An update is acknowledged (the offset moves past it) only once it started no turn or its
  user message is committed, with the offset and the turn's record in one durable commit;
  a turn recorded but not answered is answered at the next start, its message not logged
  again (``InboundMessage.stored_id``).
- A button press counts only from the owner (the layer's rule); everyone gets an answer to
  the press, so Telegram's spinner stops.
- Stopping: no more updates, running turns finish within ``agent.shutdown_grace``, then the
  bot's HTTP clients and the files' download client are closed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING

from telegram import Bot, CallbackQuery, Update
from telegram.request import HTTPXRequest

from luna.config import Config
from luna.config.secrets import telegram_token_problem
from luna.errors import ConfigError, LunaError
from luna.frontends.channels.access import Access
from luna.frontends.channels.channel import Channel, ChannelSettings
from luna.frontends.channels.contract import ChannelError
from luna.frontends.channels.cursor import ChannelLedger
from luna.frontends.channels.delivery import ScheduledDelivery
from luna.frontends.channels.sending import attempt
from luna.frontends.telegram.adapter import NO, YES, TelegramAdapter
from luna.frontends.telegram.calls import SetupError, call
from luna.frontends.telegram.offsets import Offsets, TelegramReceipts
from luna.frontends.telegram.polling import MAX_BACKOFF, poll
from luna.frontends.telegram.updates import CODEC, ID_PREFIX, event_of
from luna.frontends.telegram.webhook import WebhookServer
from luna.observe import log_event

if TYPE_CHECKING:
    from luna.agent import Agent
    from luna.attachments.intake import Intake
    from luna.frontends import Components
    from luna.memory import Memory
    from luna.scheduler.delivery import DeliveryRouter

log = logging.getLogger(__name__)

ANSWERS = {"counted": "Done.", "not_owner": "Only the owner can answer this.",
           "unknown": "This question is no longer open."}  # fmt: skip


def check(cfg: Config, mode: str = "auto") -> None:
    """A malformed TELEGRAM_TOKEN stops Luna with one line, before any network."""
    problem = telegram_token_problem(cfg.telegram.token)
    if problem:
        raise ConfigError(
            f"TELEGRAM_TOKEN is not a Telegram bot token ({problem}); copy it from "
            "@BotFather, or unset it"
        )


def access_of(cfg: Config) -> Access:
    t = cfg.telegram
    return Access.of([t.owner_id], t.allowed_users, strangers_can_chat=t.strangers_can_chat,
                     id_prefix=ID_PREFIX)  # fmt: skip


def make_bot(cfg: Config) -> Bot:
    t = cfg.telegram
    base = t.base_url.rstrip("/")
    return Bot(
        t.token,
        base_url=f"{base}/bot",
        base_file_url=f"{base}/file/bot",
        request=HTTPXRequest(
            connection_pool_size=16,
            read_timeout=t.request_timeout,
            write_timeout=t.request_timeout,
            connect_timeout=t.request_timeout,
        ),  # fmt: skip
        get_updates_request=HTTPXRequest(
            connection_pool_size=2,
            read_timeout=t.poll_timeout + 10,
            connect_timeout=t.request_timeout,
        ),  # fmt: skip
    )


class TelegramFrontend:
    """Runs the bot until ``stop``."""

    name = "telegram"

    def __init__(
        self,
        cfg: Config,
        agent: Agent,
        memory: Memory,
        intake: Intake | None,  # None: files are refused
        deliveries: DeliveryRouter | None,  # None: the scheduler is off
    ) -> None:
        self.cfg = cfg
        self.agent = agent
        self.memory = memory
        self.intake = intake
        self.deliveries = deliveries
        self.bot = make_bot(cfg)
        self.adapter = TelegramAdapter(self.bot, edit_interval=cfg.telegram.edit_interval)
        self.channel: Channel | None = None
        self.offsets: Offsets | None = None
        self.webhook: WebhookServer | None = None

    async def run(self, stop: asyncio.Event) -> None:
        try:
            if not await self._log_in(stop):
                return
            me = self.bot.bot
            ledger = ChannelLedger(self.memory.store, "telegram", str(me.id), CODEC)
            self.offsets = offsets = Offsets(int(await ledger.cursor() or 0))
            receipts = TelegramReceipts(offsets, ledger)
            settings = ChannelSettings(
                burst_window=self.cfg.telegram.burst_window,
                max_attachment_bytes=self.cfg.telegram.max_attachment_bytes,
                approval_timeout=self.cfg.tools.approval_timeout,
            )
            self.channel = Channel(self.adapter, self.agent, access_of(self.cfg), settings,
                                   receipts, intake=self.intake)  # fmt: skip
            log.info("telegram: logged in as @%s (%s), %s", me.username, me.id,
                     self.cfg.telegram.mode)  # fmt: skip
            log_event("telegram_ready", user_id=str(me.id), mode=self.cfg.telegram.mode)
            await self.channel.resume(ledger)  # turns a dead process left unanswered
            if self.deliveries is not None:
                self.deliveries.register("telegram", ScheduledDelivery(self.adapter))
            await self._serve(stop, offsets, receipts)
        except SetupError as e:
            raise LunaError(str(e)) from e
        finally:
            await self._close()

    async def _log_in(self, stop: asyncio.Event) -> bool:
        """getMe until it works (Telegram unreachable at boot is waited out, from
        ``telegram.retry_backoff`` doubling to ``MAX_BACKOFF``); False when stopped first.
        A refused token raises SetupError."""
        backoff = self.cfg.telegram.retry_backoff
        while not stop.is_set():
            try:
                await call(self.bot.initialize())
                return True
            except ChannelError as e:
                log.warning("telegram: cannot reach the Bot API (%s); again in %.0fs", e, backoff)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), backoff)
                backoff = min(MAX_BACKOFF, backoff * 2)
        return False

    async def _serve(
        self, stop: asyncio.Event, offsets: Offsets, receipts: TelegramReceipts
    ) -> None:
        if self.cfg.telegram.mode == "webhook":
            self.webhook = WebhookServer(self.cfg.telegram, self.bot, offsets, self.handle)
            await self.webhook.start()
            await stop.wait()
            return
        await call(self.bot.delete_webhook())  # polling and a webhook exclude each other
        reader = asyncio.create_task(
            poll(
                self.bot,
                offsets,
                receipts,
                self.handle,
                hold=self.cfg.telegram.poll_timeout,
                retry_backoff=self.cfg.telegram.retry_backoff,
                stop=stop,
            )  # fmt: skip
        )
        stopper = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({reader, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        if reader.done() and not reader.cancelled() and reader.exception() is not None:
            raise reader.exception()  # type: ignore[misc]

    async def handle(self, update: Update) -> None:
        """One new update: a message to the layer, a button press to its approvals."""
        assert self.channel is not None and self.offsets is not None
        try:
            if update.callback_query is not None:
                await self._press(update.callback_query)
            elif update.message is not None:
                event = event_of(self.bot, self.adapter.downloads, update.update_id,
                                 update.message, self.cfg.telegram.allowed_chats)  # fmt: skip
                if event is not None and self.channel.receive(event):
                    return  # settled once its user message is committed
        except Exception as e:  # one bad update must not stop the bot
            log.exception("telegram: handling update %s failed", update.update_id)
            log_event("channel_error", frontend="telegram", op="update", error=type(e).__name__)
        self.offsets.settle([update.update_id])

    async def _press(self, query: CallbackQuery) -> None:
        assert self.channel is not None
        outcome = "unknown"
        if query.message is not None and query.data in (YES, NO):
            outcome = self.channel.approvals.answer(
                str(query.message.message_id), str(query.from_user.id), query.data == YES
            )
        text = ANSWERS[outcome]
        alert = outcome == "not_owner"
        await attempt("telegram", "answer_callback", lambda: call(query.answer(text, alert)))

    async def _close(self) -> None:
        await self.agent.drain(self.cfg.agent.shutdown_grace)
        if self.deliveries is not None:
            self.deliveries.unregister("telegram")
        if self.webhook is not None:
            await self.webhook.stop()
        if self.channel is not None:
            await self.channel.aclose()
        await self.adapter.aclose()  # the downloads' client
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.bot.shutdown(), 10)


def make(parts: Components, args: argparse.Namespace) -> TelegramFrontend:
    deliveries = parts.scheduler.router if parts.scheduler is not None else None
    return TelegramFrontend(parts.cfg, parts.agent, parts.memory, parts.intake, deliveries)
