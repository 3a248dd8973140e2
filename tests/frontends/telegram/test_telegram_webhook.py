"""Webhook mode through real HTTP: Telegram's secret-token header decides, a wrong or missing
one starts nothing, and an update answered 200 is already taken in."""

from __future__ import annotations

import socket
from collections.abc import Callable
from typing import Any

from luna.frontends.telegram.webhook import webhook_secret
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.telegram_server import TOKEN, FakeTelegram
from tests.frontends.telegram.conftest import OWNER


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_telegram_webhook_takes_the_right_secret_only(
    start_luna: Callable[..., Any], telegram: FakeTelegram, llm_server: FakeLLMServer
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}/telegram/hook"
    luna = await start_luna({"mode": "webhook", "webhook_url": url, "webhook_port": port})
    await telegram.wait_for(lambda: telegram.webhook["url"] == url)
    secret = telegram.webhook["secret_token"]
    assert secret == webhook_secret(TOKEN) and len(secret) == 64
    llm_server.script(Reply(content="Webhook answer."))
    update = telegram.message(OWNER, "via webhook")
    assert await telegram.send_webhook(update, "wrong" + secret[5:]) == 401
    assert await telegram.send_webhook(update, None) == 401
    assert llm_server.requests == [] and telegram.shown(OWNER) == []
    assert await telegram.send_webhook(update, secret) == 200
    # A 200 means taken in: the user's message is already in the session log.
    assert await luna.history(f"tg-{OWNER}") == [("user", "via webhook")]
    await telegram.wait_for(lambda: telegram.shown(OWNER) == ["Webhook answer."])
    assert await telegram.send_webhook(update, secret) == 200  # Telegram retried: no new turn
    assert len(llm_server.requests) == 1
    assert telegram.called("getUpdates") == []
