"""Who may schedule what, decided from the configuration at the moment it matters.

Invariants:
- The owner is ``"owner"`` (the REPL, the CLI, the web page), ``discord.owner_id``,
  ``telegram:`` + ``telegram.owner_id`` or ``matrix.owner`` (a Matrix id, ``@…``); the people
  in ``discord.allowed_users``, ``telegram.allowed_users`` (``telegram:<id>``) and
  ``matrix.allowed_users`` are trusted; everyone else is a stranger.
- Only the owner and trusted people may schedule prompts (turns with tools). Strangers may
  set plain reminders when ``scheduler.strangers = "reminders"``, else nothing.
- The same rules are applied again when a task runs: a person removed from
  ``allowed_users`` since has their prompts refused, not run.
"""

from __future__ import annotations

from typing import Literal

from luna.config import Config
from luna.scheduler.model import OWNER

Role = Literal["owner", "trusted", "stranger"]


def role_of(cfg: Config, user_id: str) -> Role:
    if user_id == OWNER:
        return "owner"
    if user_id.startswith("telegram:"):
        return _telegram_role(cfg, user_id.removeprefix("telegram:"))
    if user_id.startswith("@"):
        return _matrix_role(cfg, user_id)
    try:
        uid = int(user_id)
    except ValueError:
        return "stranger"
    if cfg.discord.owner_id and uid == cfg.discord.owner_id:
        return "owner"
    if uid in cfg.discord.allowed_users:
        return "trusted"
    return "stranger"


def _telegram_role(cfg: Config, telegram_id: str) -> Role:
    if cfg.telegram.owner_id and telegram_id == str(cfg.telegram.owner_id):
        return "owner"
    if telegram_id in {str(u) for u in cfg.telegram.allowed_users}:
        return "trusted"
    return "stranger"


def _matrix_role(cfg: Config, mxid: str) -> Role:
    if cfg.matrix.owner and mxid == cfg.matrix.owner:
        return "owner"
    if mxid in cfg.matrix.allowed_users:
        return "trusted"
    return "stranger"


def creator_id(cfg: Config, user_id: str) -> str:
    """The id tasks are filed under: the owner is one person on every front-end."""
    return OWNER if role_of(cfg, user_id) == "owner" else user_id


def may_schedule(cfg: Config, role: Role, kind: str) -> str | None:
    """None when ``role`` may have a task of ``kind``, else why not (one line)."""
    if role != "stranger":
        return None
    if cfg.scheduler.strangers == "none":
        return "only the owner and allowed users can schedule tasks here"
    if kind != "reminder":
        return "only the owner and allowed users can schedule prompts; you can set plain reminders"
    return None


def cap_for(cfg: Config, role: Role) -> int:
    if role == "stranger":
        return cfg.scheduler.max_tasks_per_stranger
    return cfg.scheduler.max_tasks_per_user
