"""Shape checks for secrets, which never leave the environment: is this a Discord bot token?

No network: a token is checked by its form only (three base64url segments, the first decoding
to the bot's numeric id), so a copy-paste mistake is caught before Luna connects anywhere.
"""

from __future__ import annotations

import base64
import binascii
import re

_TOKEN_RE = re.compile(r"^[A-Za-z0-9_-]{17,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{20,}$")


def discord_bot_id(token: str) -> str | None:
    """The bot id a well-formed token starts with, or None."""
    if not _TOKEN_RE.match(token):
        return None
    first = token.split(".")[0]
    try:
        user_id = base64.urlsafe_b64decode(first + "=" * (-len(first) % 4)).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return user_id if user_id.isdigit() else None


def discord_token_problem(token: str) -> str | None:
    """Why the token is malformed, or None when it looks like a Discord bot token."""
    if not _TOKEN_RE.match(token):
        return "not three base64url segments separated by dots"
    if discord_bot_id(token) is None:
        return "its first segment does not decode to a numeric bot id"
    return None
