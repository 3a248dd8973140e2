"""One python-telegram-bot call with a timeout, its errors translated to the channel layer's.

Invariant: the only place python-telegram-bot's exceptions are read: a flood wait
(``RetryAfter``) is ``RateLimitedError`` with its ``retry_after``, 403 ``UnreachableError``
(blocked, kicked), 400 :class:`RefusedError` (the Bot API says which only in words: the
adapter decides by what it sent, never by the words), a timeout or network failure
``ChannelError``; ``InvalidToken`` and ``Conflict`` (a webhook is set while polling) are
:class:`SetupError`, which stops the front-end.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import warnings
from collections.abc import Awaitable
from typing import TypeVar

from telegram import error as tg
from telegram.warnings import PTBDeprecationWarning

from luna.errors import LunaError
from luna.frontends.channels.contract import ChannelError, RateLimitedError, UnreachableError

T = TypeVar("T")
CALL_TIMEOUT = 60.0  # python-telegram-bot has its own, shorter, per-request timeouts


class RefusedError(ChannelError):
    """Telegram answered 400 (a text it cannot parse or take, a message it cannot edit)."""


class SetupError(LunaError):
    """The bot cannot run as configured: the token is refused, or another reader holds it."""


def retry_after(error: tg.RetryAfter) -> float:
    """A flood wait's seconds: an int in python-telegram-bot 22 (with a warning that it will
    become a timedelta), a timedelta later; both are read."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PTBDeprecationWarning)
        value = error.retry_after
    return value.total_seconds() if isinstance(value, dt.timedelta) else float(value)


async def call(coro: Awaitable[T], deadline: float = CALL_TIMEOUT) -> T:
    """Await a Bot API call for at most ``deadline`` seconds, its errors translated."""
    try:
        return await asyncio.wait_for(coro, deadline)
    except tg.RetryAfter as e:
        raise RateLimitedError(retry_after(e), "Telegram flood control") from e
    except tg.Forbidden as e:
        raise UnreachableError(f"Telegram 403: {e.message}", status=403) from e
    except tg.BadRequest as e:
        raise RefusedError(f"Telegram 400: {e.message}", status=400) from e
    except tg.InvalidToken as e:
        raise SetupError(
            "Telegram refused TELEGRAM_TOKEN (401/404); copy it again from @BotFather"
        ) from e
    except tg.Conflict as e:
        raise SetupError(
            f"Telegram: {e.message} (another program reads this bot's updates, or a webhook "
            "is set while telegram.mode is polling)"
        ) from e
    except tg.TimedOut as e:
        raise ChannelError("Telegram timed out") from e
    except tg.TelegramError as e:
        raise ChannelError(f"Telegram: {e.message}") from e
