"""Which front-ends run with a Telegram token, and what the start refuses before any network."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from luna.config import Config
from luna.errors import ConfigError
from luna.frontends import check, chosen
from luna.hooks.target import target_problem
from luna.scheduler.model import Target, owner_target
from luna.scheduler.rights import role_of
from tests.fakes.telegram_server import TOKEN

DISCORD = "MTIzNDU2Nzg5MDEyMzQ1Njc4.Gabcde.abcdefghijklmnopqrstuvwxyz0123456789AB"


def test_telegram_runs_alongside_discord_and_the_web(luna_config: Callable[..., Config]) -> None:
    both = luna_config({"web": {"enabled": True}},
                       env={"TELEGRAM_TOKEN": TOKEN, "DISCORD_TOKEN": DISCORD})  # fmt: skip
    assert chosen(both, "auto") == ["discord", "telegram", "web"]
    alone = luna_config(env={"TELEGRAM_TOKEN": TOKEN})
    assert chosen(alone, "auto") == ["telegram"]
    assert chosen(alone, "repl") == ["repl"]
    assert chosen(luna_config(), "auto") == ["repl"]


def test_telegram_token_is_checked_before_any_network(luna_config: Callable[..., Any]) -> None:
    check(["telegram"], luna_config(env={"TELEGRAM_TOKEN": TOKEN}))
    with pytest.raises(ConfigError, match="TELEGRAM_TOKEN is not a Telegram bot token"):
        check(["telegram"], luna_config(env={"TELEGRAM_TOKEN": "not-a-token"}))


def test_telegram_token_and_webhook_settings_are_refused_where_wrong(
    luna_config: Callable[..., Any],
) -> None:
    with pytest.raises(ConfigError, match="TELEGRAM_TOKEN"):
        luna_config({"telegram": {"token": TOKEN}})  # a secret never comes from a file
    with pytest.raises(ConfigError, match="webhook_url"):
        luna_config({"telegram": {"mode": "webhook", "webhook_url": "http://example.org/t"}})
    local = luna_config({"telegram": {"mode": "webhook", "webhook_url": "http://127.0.0.1/t"}})
    assert local.telegram.mode == "webhook"


def test_telegram_owner_target_for_hooks_and_the_heartbeat(
    luna_config: Callable[..., Any],
) -> None:
    cfg = luna_config({"telegram": {"owner_id": 42, "allowed_users": [7]}},
                      env={"TELEGRAM_TOKEN": TOKEN})  # fmt: skip
    target = owner_target(cfg)
    assert target == Target("telegram", {"chat_id": "42", "user_id": "telegram:42"})
    assert target_problem(cfg, target) is None
    assert target_problem(cfg, Target("telegram", {"chat_id": "x"})) is not None
    assert [role_of(cfg, u) for u in ("telegram:42", "telegram:7", "telegram:9", "42")] == [
        "owner", "trusted", "stranger", "stranger"
    ]  # fmt: skip
