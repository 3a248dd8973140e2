"""``luna doctor --only telegram`` as a real process against the loopback Bot API: the token
(getMe), the mode, and the webhook's state, never the token itself in the output."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.telegram_server import TOKEN, FakeTelegram
from tests.luna_process import REPO


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    with FakeTelegram() as server:
        yield server


def doctor(tmp_path: Path, section: str, token: str | None) -> tuple[int, dict[str, Any]]:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[observe]\nlog_dir = "{tmp_path / "logs"}"\n[memory]\n'
        f'db_path = "{tmp_path / "luna.db"}"\n[telegram]\n{section}\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "TELEGRAM_TOKEN"}
    if token is not None:
        env["TELEGRAM_TOKEN"] = token
    proc = subprocess.run(
        [sys.executable, "-m", "luna", "--config", str(config), "doctor", "--only", "telegram",
         "--json"],
        cwd=REPO, env={**env, "PYTHONIOENCODING": "utf-8"}, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    assert proc.stdout.strip(), proc.stderr
    assert TOKEN.split(":")[1] not in proc.stdout + proc.stderr
    return proc.returncode, {c["name"]: c for c in json.loads(proc.stdout)["checks"]}


def test_doctor_telegram_polling_with_a_working_token(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    code, checks = doctor(tmp_path, f'base_url = "{telegram.url}"\nowner_id = 7', TOKEN)
    assert code == 0
    assert checks["Telegram token"]["ok"] is True
    assert "@luna_test_bot (id 123456)" in checks["Telegram token"]["detail"]
    assert checks["Telegram mode"]["detail"].startswith("long polling")


def test_doctor_telegram_webhook_error_and_a_refused_token(
    tmp_path: Path, telegram: FakeTelegram
) -> None:
    url = "https://luna.example.org/telegram"
    telegram.webhook = {"url": url}
    telegram.webhook_errors.append("Wrong response from the webhook: 502 Bad Gateway")
    section = f'base_url = "{telegram.url}"\nmode = "webhook"\nwebhook_url = "{url}"'
    code, checks = doctor(tmp_path, section, TOKEN)
    assert code == 0  # a warning, not a failure
    webhook = checks["Telegram webhook"]
    assert webhook["ok"] is False and "502 Bad Gateway" in webhook["detail"]
    code, checks = doctor(tmp_path, section, "999:" + "x" * 35)
    assert code != 0 and "refused the token" in checks["Telegram token"]["detail"]


def test_doctor_telegram_is_skipped_without_a_token(tmp_path: Path) -> None:
    code, checks = doctor(tmp_path, "", None)
    assert code == 0 and checks["Telegram"]["ok"] is None
