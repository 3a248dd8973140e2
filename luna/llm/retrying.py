"""One LLM request, tried again while trying again can help.

Job: :func:`with_retries` runs one request (plain, or a stream before any of it arrived) and
decides after each failure, with :mod:`luna.llm.failures`, whether to wait and send it again.

Invariants:
- A model still loading (llama-server's 503 ``unavailable_error``) is waited for without
  counting as a retry, asked again every ``llm.loading_poll`` seconds and bounded by the
  caller's ``llm.timeout`` deadline; the caller is told once through ``on_status``.
- Connection failures, 429, 502, 503 and 504 are retried at most ``llm.max_retries`` times,
  after the server's Retry-After or an exponential backoff from ``llm.retry_backoff``; the
  first retry of a kept-alive connection the server dropped as the request went out is sent
  at once (nothing was answered on it; the next connection is fresh).
- Anything else, and the last failure, is raised as the one-line LLMError ``translate`` makes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx
import openai

from luna.config import LLMConfig
from luna.errors import LLMError
from luna.llm.contract import TextCallback
from luna.llm.failures import is_loading, is_retryable, is_stale_connection, retry_after
from luna.observe import TURN_DETAIL, log_event

_log = logging.getLogger(__name__)

WAITING_FOR_LOAD = "the LLM server is still loading its model; waiting…"

T = TypeVar("T")


async def with_retries(
    call: Callable[[], Awaitable[T]],
    cfg: LLMConfig,
    translate: Callable[[BaseException], LLMError],
    on_status: TextCallback | None = None,
) -> T:
    """``call()``'s result, tried again as the module invariants say."""
    attempt = 0
    told_loading = False
    while True:
        try:
            return await call()
        except (openai.APIError, httpx.HTTPError) as e:
            if is_loading(e):
                if not told_loading:
                    told_loading = True
                    _log.warning("LLM at %s is loading its model; waiting", cfg.endpoint)
                    log_event("llm_wait", reason="loading", endpoint=cfg.endpoint)
                    if on_status:
                        await on_status(WAITING_FOR_LOAD)
                await asyncio.sleep(cfg.loading_poll)
                continue
            if attempt >= cfg.max_retries or not is_retryable(e):
                raise translate(e) from e
            delay = retry_after(e) or cfg.retry_backoff * (2**attempt)
            if attempt == 0 and is_stale_connection(e):
                delay = 0.0
            attempt += 1
            _log.warning(
                "LLM call failed (%s), retry %d/%d in %.2fs",
                type(e).__name__,
                attempt,
                cfg.max_retries,
                delay,
                extra=TURN_DETAIL,
            )
            await asyncio.sleep(delay)
