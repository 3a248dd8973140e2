"""``luna doctor``'s Telegram checks: the token (getMe), the mode, the webhook's state.

Invariants:
- No Telegram token: the group is skipped (Telegram is off). A malformed one is ✗ without
  any network call (the front-end refuses it at start, by the same rule).
- getMe decides whether the token works: refused (401/404) is ✗; Telegram unreachable is ⚠
  (the network may come back; Luna retries).
- getWebhookInfo says what Telegram will do: in polling mode a webhook left set is noted
  (Luna deletes it when it starts); in webhook mode a different URL or Telegram's last
  delivery error is ⚠.
- The token is never printed: errors are reported by their type, never their text (an
  HTTP error's text holds the URL, and the URL holds the token).
"""

from __future__ import annotations

from typing import Any

import httpx

from luna.config import Config
from luna.config.secrets import telegram_token_problem
from luna.doctor.result import CheckResult, fail, ok, skipped

TIMEOUT = 4.0


async def _call(client: httpx.AsyncClient, base: str, method: str) -> tuple[int, Any]:
    response = await client.get(f"{base}/{method}")
    try:
        body = response.json()
    except ValueError:
        body = {}
    return response.status_code, body.get("result") if isinstance(body, dict) else None


def _webhook(cfg: Config, info: dict[str, Any]) -> CheckResult:
    t = cfg.telegram
    url = str(info.get("url") or "")
    pending = int(info.get("pending_update_count") or 0)
    error = str(info.get("last_error_message") or "")
    if t.mode == "polling":
        note = f"; a webhook is set ({url}): Luna deletes it when it starts" if url else ""
        return ok("Telegram mode", f"long polling, {pending} update(s) waiting{note}")
    if url != t.webhook_url:
        shown = url or "none"
        return fail("Telegram webhook", f"Telegram has {shown}, config says {t.webhook_url}",
                    "start Luna: it sets the webhook", essential=False)  # fmt: skip
    if error:
        return fail("Telegram webhook", f"{url}: Telegram's last delivery failed: {error}",
                    "check the reverse proxy forwards it to telegram.webhook_listen:"
                    "webhook_port", essential=False)  # fmt: skip
    return ok("Telegram webhook", f"{url}, {pending} update(s) waiting")


async def check_telegram(cfg: Config) -> list[CheckResult]:
    t = cfg.telegram
    if not t.token:
        return [skipped("Telegram", "TELEGRAM_TOKEN is not set")]
    problem = telegram_token_problem(t.token)
    if problem:
        return [fail("Telegram token", f"TELEGRAM_TOKEN is malformed: {problem}",
                     "copy the token again from @BotFather (/token)")]  # fmt: skip
    base = f"{t.base_url.rstrip('/')}/bot{t.token}"
    try:
        async with httpx.AsyncClient(timeout=TIMEOUT) as client:
            status, me = await _call(client, base, "getMe")
            if status in (401, 404):
                return [fail("Telegram token", "Telegram refused the token (getMe)",
                             "copy the token again from @BotFather (/token)")]  # fmt: skip
            _, info = await _call(client, base, "getWebhookInfo")
    except httpx.HTTPError as e:
        return [fail("Telegram", f"{t.base_url} unreachable ({type(e).__name__})",
                     "check the network; Luna retries when it runs", essential=False)]  # fmt: skip
    if not isinstance(me, dict):
        return [fail("Telegram token", f"getMe answered {status}", "try again later",
                     essential=False)]  # fmt: skip
    owner = "" if t.owner_id else "; telegram.owner_id is not set (nobody can approve tools)"
    results = [ok("Telegram token", f"@{me.get('username')} (id {me.get('id')}){owner}")]
    if isinstance(info, dict):
        results.append(_webhook(cfg, info))
    return results
