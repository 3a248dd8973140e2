"""Webhook mode: Telegram posts each update to Luna; the secret-token header is checked.

Job: :class:`WebhookServer` serves ``POST <path of telegram.webhook_url>`` on
``telegram.webhook_listen``:``webhook_port`` (behind the user's reverse proxy) and registers
the URL with ``setWebhook`` and a secret token.

Invariants:
- A request without the exact secret in ``X-Telegram-Bot-Api-Secret-Token`` (constant-time
  compare) gets 401 and starts nothing; a body that is not an update gets 400.
- The secret is derived from the bot token (HMAC-SHA256), so nothing more needs keeping.
- A 200 means the update is settled (its user message committed, or it started no turn);
  an update not settled within ``HOLD`` seconds gets 503, so Telegram sends it again (a
  copy already taken in is refused by ``Offsets``).
- Bodies are capped at ``MAX_BODY`` bytes.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import web
from telegram import Bot, Update

from luna.config.telegram import TelegramConfig
from luna.frontends.telegram.calls import call
from luna.frontends.telegram.offsets import Offsets
from luna.frontends.telegram.polling import ALLOWED_UPDATES
from luna.observe import log_event

log = logging.getLogger(__name__)

SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
HOLD = 50.0
MAX_BODY = 1_000_000


def webhook_secret(token: str) -> str:
    """The secret token Telegram sends back with every update (64 hex characters)."""
    return hmac.new(token.encode(), b"luna-telegram-webhook", hashlib.sha256).hexdigest()


def webhook_path(url: str) -> str:
    return urlsplit(url).path or "/"


class WebhookServer:
    """The webhook endpoint; ``start`` registers it, ``stop`` removes the listener."""

    def __init__(
        self,
        cfg: TelegramConfig,
        bot: Bot,
        offsets: Offsets,
        handle: Callable[[Update], Awaitable[None]],
    ) -> None:
        self.cfg = cfg
        self.bot = bot
        self.offsets = offsets
        self.handle = handle
        self.secret = webhook_secret(cfg.token)
        self.port = 0
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post(webhook_path(self.cfg.webhook_url), self._post)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.cfg.webhook_listen, self.cfg.webhook_port)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        await call(
            self.bot.set_webhook(
                self.cfg.webhook_url, secret_token=self.secret, allowed_updates=ALLOWED_UPDATES
            )
        )
        log.info("telegram: webhook at %s (listening on port %s)", self.cfg.webhook_url, self.port)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()

    async def _post(self, request: web.Request) -> web.Response:
        offered = request.headers.get(SECRET_HEADER, "")
        if not hmac.compare_digest(offered.encode(), self.secret.encode()):
            log_event("telegram_webhook_refused", reason="secret")
            return web.Response(status=401, text="wrong secret token")
        try:
            data = json.loads(await request.read())
            update = Update.de_json(data, self.bot)
        except (ValueError, TypeError, KeyError):
            return web.Response(status=400, text="not an update")
        if update is None:
            return web.Response(status=400, text="not an update")
        if self.offsets.receive(update.update_id):
            await self.handle(update)
        if await self.offsets.wait_settled(update.update_id, HOLD):
            return web.Response(status=200)
        return web.Response(status=503, text="not taken in yet; send it again")
