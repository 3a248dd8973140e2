"""Where a hook's results go: its ``deliver_to`` read as a scheduler delivery target.

Invariants:
- ``"owner"`` is where the owner hears from Luna when no conversation is named, the
  scheduler's rule (:func:`luna.scheduler.model.owner_target`: a Discord DM when a bot token
  and ``discord.owner_id`` are set, else a Telegram chat, else a Matrix room, else the
  terminal); ``"discord"``
  is the owner's DM, ``"telegram"`` the owner's Telegram chat, ``"matrix"`` the owner's
  direct room on Matrix (found, or made, when a result is shown);
  ``"web"`` is the page, in the hook's session; ``"repl"`` the terminal's next start.
- A table names a front-end and its own address, as the scheduler stores it (Discord:
  ``channel_id``, ``user_id``, ``is_dm``; Telegram: ``chat_id``, ``thread_id``; Matrix:
  ``room_id``, ``thread_root``, or ``user_id`` with ``is_dm``).
- :func:`target_problem` finds, without any network call, a target nothing could ever show:
  an unknown front-end, a Discord address without a numeric id, Discord without its token,
  a Matrix address naming no room (``!…``) or person (``@…``), Matrix without a login.
"""

from __future__ import annotations

from luna.config import Config
from luna.config.hooks import HookConfig, session_of
from luna.errors import ScheduleError
from luna.scheduler.model import Target, owner_target

# The front-ends that register with the scheduler's delivery router.
FRONTENDS = ("repl", "web", "discord", "telegram", "matrix")
DISCORD_IDS = ("channel_id", "user_id")


def resolve(cfg: Config, name: str, hook: HookConfig) -> Target:
    """Hook ``name``'s delivery target; ScheduleError when ``deliver_to`` cannot work."""
    spec = hook.deliver_to
    if spec == "owner":
        return owner_target(cfg)
    if spec in ("discord", "telegram", "matrix"):
        return owner_target(cfg, spec)
    if spec == "web":
        return Target("web", {"session_id": session_of(name, hook)})
    if isinstance(spec, str):
        return Target(spec)
    return Target.from_json(dict(spec))


def target_problem(cfg: Config, target: Target) -> str | None:
    """Why nothing could show deliveries at ``target``, or None."""
    if target.frontend not in FRONTENDS:
        return f"unknown front-end {target.frontend!r} (one of {', '.join(FRONTENDS)})"
    if target.frontend == "telegram":
        return _telegram_problem(cfg, target)
    if target.frontend == "matrix":
        return _matrix_problem(cfg, target)
    if target.frontend != "discord":
        return None
    ids = {k: str(target.address.get(k, "")) for k in DISCORD_IDS if target.address.get(k)}
    if not ids:
        return "a Discord target needs channel_id or user_id"
    bad = [k for k, v in ids.items() if not v.isdigit()]
    if bad:
        return f"a Discord {bad[0]} is a number (Developer Mode → Copy ID)"
    if not cfg.discord.token:
        return "it delivers to Discord, but DISCORD_TOKEN is not set: results would wait there"
    return None


def _telegram_problem(cfg: Config, target: Target) -> str | None:
    chat = str(target.address.get("chat_id", ""))
    if not chat.removeprefix("-").isdigit():
        return "a Telegram target needs chat_id, a number (a group's is negative)"
    if not cfg.telegram.token:
        return "it delivers to Telegram, but TELEGRAM_TOKEN is not set: results would wait there"
    return None


def _matrix_problem(cfg: Config, target: Target) -> str | None:
    room = str(target.address.get("room_id", ""))
    user = str(target.address.get("user_id", ""))
    if not (room.startswith("!") or (user.startswith("@") and target.address.get("is_dm"))):
        return 'a Matrix target needs room_id ("!…:server") or user_id ("@…:server") with is_dm'
    m = cfg.matrix
    if not (m.homeserver and (m.access_token or m.password)):
        return (
            "it delivers to Matrix, but matrix.homeserver and a login (MATRIX_ACCESS_TOKEN or "
            "MATRIX_PASSWORD) are not set: results would wait there"
        )
    return None


def hook_target(cfg: Config, name: str, hook: HookConfig) -> tuple[Target | None, str | None]:
    """(target, None), or (None, why it cannot work)."""
    try:
        target = resolve(cfg, name, hook)
    except ScheduleError as e:
        return None, str(e)
    problem = target_problem(cfg, target)
    return (None, problem) if problem else (target, None)
