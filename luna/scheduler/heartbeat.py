"""The heartbeat's settings as start-up checks them: the one place both Luna's start and
``luna config set`` ask whether ``[scheduler] heartbeat*`` can work.

Invariant: a configuration this accepts is one the scheduler starts with; every refusal is a
ConfigError naming the key. Light to import (no store, no database), for the CLI.
"""

from __future__ import annotations

import datetime as dt

from luna.config import Config
from luna.config.timezone import zone_for
from luna.errors import ConfigError, ScheduleError
from luna.scheduler.model import Schedule, Target, owner_target
from luna.scheduler.timing import Limits, check_cron

__all__ = ["check_config", "check_heartbeat", "heartbeat_schedule", "heartbeat_target", "limits_of"]


def limits_of(cfg: Config) -> Limits:
    return Limits(cfg.scheduler.min_interval, cfg.scheduler.max_horizon_days)


def heartbeat_schedule(cfg: Config, now: dt.datetime) -> Schedule:
    """The heartbeat's cron schedule, checked as any task's would be."""
    zone = zone_for(cfg.agent.timezone)
    try:
        cron = check_cron(cfg.scheduler.heartbeat_cron, zone, now, limits_of(cfg))
    except ScheduleError as e:
        raise ConfigError(f"config: scheduler.heartbeat_cron: {e}") from None
    return Schedule("cron", cron, zone.key)


def heartbeat_target(cfg: Config) -> Target:
    try:
        return owner_target(cfg, cfg.scheduler.heartbeat_to)
    except ScheduleError as e:
        raise ConfigError(f"config: scheduler.heartbeat_to: {e}") from None


def check_heartbeat(cfg: Config, now: dt.datetime) -> None:
    """Refuse a heartbeat that is on and cannot work (off or scheduler disabled: nothing)."""
    if cfg.scheduler.enabled and cfg.scheduler.heartbeat:
        heartbeat_schedule(cfg, now)
        heartbeat_target(cfg)


def check_config(cfg: Config) -> None:
    """Start-up's checks across keys, now: what ``luna config set``, the web page's settings
    and ``luna doctor`` ask before they call a configuration good."""
    check_heartbeat(cfg, dt.datetime.now(dt.UTC))
