"""Shape checks for secrets, which never leave the environment: is this a Discord or Telegram bot
token, and is ``LUNA_WEB_TOKEN`` (or a webhook's secret) worth the name?

No network: a Discord or Telegram token is checked by its form only (Discord: three base64url
segments, the first decoding to the bot's numeric id; Telegram: the bot id, a colon, a secret),
so a copy-paste mistake is caught before Luna connects anywhere. The web token is checked for
length and for the variety a random secret has (:func:`web_token_problem`, the one rule the web
front-end and ``luna doctor`` both apply); a webhook's secret by the same measure, with a
higher bar (:func:`hook_secret_problem`).

Invariant: patterns match the whole value (``fullmatch``): a trailing newline is not a match.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence

_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{17,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{20,}")

WEB_TOKEN_MIN_CHARS = 16
# Estimated bits (see ``web_token_bits``) below which a web token is refused. A random token
# of 16 characters or more scores far above it (secrets.token_urlsafe(12): 48 at the least in
# 50,000 draws; token_hex(8): 36); repeated, periodic and counting tokens score under 20.
WEB_TOKEN_MIN_BITS = 32.0
HOW_TO_MAKE_WEB_TOKEN = (
    'set LUNA_WEB_TOKEN to a long random secret, e.g. LUNA_WEB_TOKEN="$(python -c '
    "'import secrets; print(secrets.token_urlsafe(32))')\" (systemd: in /etc/luna/luna.env)"
)


def discord_bot_id(token: str) -> str | None:
    """The bot id a well-formed token starts with, or None."""
    if not _TOKEN_RE.fullmatch(token):
        return None
    first = token.split(".")[0]
    try:
        user_id = base64.urlsafe_b64decode(first + "=" * (-len(first) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return user_id if user_id.isdigit() else None


def discord_token_problem(token: str) -> str | None:
    """Why the token is malformed, or None when it looks like a Discord bot token."""
    if not _TOKEN_RE.fullmatch(token):
        return "not three base64url segments separated by dots"
    if discord_bot_id(token) is None:
        return "its first segment does not decode to a numeric bot id"
    return None


_TELEGRAM_TOKEN_RE = re.compile(r"\d{1,20}:[A-Za-z0-9_-]{30,}")


def telegram_token_problem(token: str) -> str | None:
    """Why the token is not a Telegram bot token (as @BotFather gives them), or None."""
    if not _TELEGRAM_TOKEN_RE.fullmatch(token):
        return "not the bot id, a colon, then 30 or more letters, digits, _ or -"
    return None


def _bits(symbols: Sequence[object]) -> float:
    """Shannon entropy of the sequence's own symbol frequencies, times its length."""
    n = len(symbols)
    if n == 0:
        return 0.0
    return -sum(c * math.log2(c / n) for c in Counter(symbols).values())


def web_token_bits(token: str) -> float:
    """A deliberately rough estimate of the token's entropy in bits: the lesser of the entropy
    of its characters and that of the steps between neighbouring characters (plus the choice
    of the first). Blank and repeated tokens score 0, ``abab…`` 16, ``abcd…`` and other
    counting runs under 10; it knows no dictionary, so it says "too little variety", never
    "strong"."""
    steps: Iterable[int] = (ord(b) - ord(a) for a, b in zip(token, token[1:], strict=False))
    by_step = _bits(list(steps)) + math.log2(max(2, len(set(token))))
    return min(_bits(token), by_step)


def web_token_problem(token: str) -> str | None:
    """Why ``token`` cannot guard the web front-end (one line), or None."""
    if not token:
        return "LUNA_WEB_TOKEN is not set"
    if not token.strip():
        return "LUNA_WEB_TOKEN is blank"
    if token != token.strip():
        return (
            "LUNA_WEB_TOKEN starts or ends with whitespace (a copy-paste slip? no client "
            "could send it)"
        )
    if len(token) < WEB_TOKEN_MIN_CHARS:
        return f"LUNA_WEB_TOKEN is shorter than {WEB_TOKEN_MIN_CHARS} characters"
    if web_token_bits(token) < WEB_TOKEN_MIN_BITS:
        return (
            "LUNA_WEB_TOKEN has too little variety to be a secret (repeated, periodic or "
            "counting characters)"
        )
    return None


HOOK_SECRET_MIN_CHARS = 32
# A random secret of 32 characters scores far above this (secrets.token_hex(16): 94 at the
# least in 20,000 draws; token_urlsafe(24): 127); one made of a short repeated or counting
# pattern scores under it.
HOOK_SECRET_MIN_BITS = 64.0
HOW_TO_MAKE_HOOK_SECRET = "make one with: openssl rand -hex 32"


def hook_secret_problem(secret: str, var: str) -> str | None:
    """Why ``secret`` (read from ``var``) cannot sign a webhook's events (one line), or None."""
    if not secret:
        return f"{var} is not set"
    if secret != secret.strip():
        return f"{var} starts or ends with whitespace (a copy-paste slip?)"
    if len(secret) < HOOK_SECRET_MIN_CHARS:
        return f"{var} is shorter than {HOOK_SECRET_MIN_CHARS} characters"
    if web_token_bits(secret) < HOOK_SECRET_MIN_BITS:
        return f"{var} has too little variety to be a secret (repeated or counting characters)"
    return None
