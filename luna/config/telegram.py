"""The ``[telegram]`` section: the Telegram front-end (``luna.frontends.telegram``).

Invariants:
- The bot token comes from ``TELEGRAM_TOKEN`` only (a file holding it is refused, like every
  secret); with no token the front-end does not run.
- Ids are Telegram's numeric user and chat ids; ``owner_id`` 0 means no owner (nobody can
  approve a tool, and nobody has the owner's memories from Telegram).
- ``mode = "webhook"`` needs ``webhook_url`` (https, the address Telegram posts to, usually a
  reverse proxy in front of ``webhook_listen``:``webhook_port``; plain http only to this
  machine, for a local Bot API server).
"""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator

from luna.config.section import Section

DEFAULT_BASE_URL = "https://api.telegram.org"


class TelegramConfig(Section):
    token: str = Field("", repr=False)  # secret: TELEGRAM_TOKEN only
    owner_id: Annotated[int, Field(ge=0)] = 0
    allowed_users: list[int] = Field(default_factory=list)
    # Groups and supergroups Luna answers in (empty: any group an allowed person writes in).
    allowed_chats: list[int] = Field(default_factory=list)
    strangers_can_chat: bool = False
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str = ""  # public https URL Telegram posts updates to (mode = "webhook")
    webhook_listen: str = "127.0.0.1"
    webhook_port: Annotated[int, Field(ge=0, le=65535)] = 8443
    base_url: str = DEFAULT_BASE_URL  # the Bot API server (a local one, or a test's fake)
    poll_timeout: Annotated[int, Field(ge=0, le=50)] = 30  # long polling: seconds held open
    request_timeout: Annotated[float, Field(ge=1, le=300)] = 20.0
    # Seconds before the Bot API is tried again after it could not be reached (doubling).
    retry_backoff: Annotated[float, Field(gt=0, le=30)] = 1.0
    burst_window: Annotated[float, Field(ge=0, le=60)] = 1.5
    # Telegram allows about one message a second per chat and 20 a minute per group.
    edit_interval: Annotated[float, Field(ge=0.2, le=60)] = 2.0
    # Largest file downloaded from a message (attachments.max_bytes applies too); 20 MB is
    # the most a bot can download through the Bot API's getFile.
    max_attachment_bytes: Annotated[int, Field(ge=0, le=20_000_000)] = 20_000_000

    @model_validator(mode="after")
    def _webhook_needs_url(self) -> TelegramConfig:
        if self.mode == "webhook" and not _is_webhook_url(self.webhook_url):
            raise ValueError('mode = "webhook" needs webhook_url, an https:// address')
        return self


def _is_webhook_url(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return True
    return parts.scheme == "http" and parts.hostname in ("127.0.0.1", "localhost", "::1")
