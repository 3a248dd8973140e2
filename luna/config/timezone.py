"""The user's time zone (``agent.timezone``): an IANA name, or empty for the system's.

Invariants:
- :func:`zone_for` always returns a ``ZoneInfo`` with an IANA key, so times computed in it are
  DST-correct and the key can be stored and looked up again later.
- The system's zone comes from files (``/etc/localtime``'s link target, then
  ``/etc/timezone``), never from the environment; when neither names a zone, UTC is used and
  a warning is logged once.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

log = logging.getLogger(__name__)

LOCALTIME = Path("/etc/localtime")
TIMEZONE_FILE = Path("/etc/timezone")


def is_zone_name(name: str) -> bool:
    """True when ``name`` is an IANA time zone this machine (or tzdata) knows."""
    if not name or not name.isascii() or name.startswith(("/", ".")) or ".." in name:
        return False
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return False
    return True


def suggest_zone(name: str) -> str:
    """``" (did you mean 'Europe/Berlin'?)"`` for a near miss, else ``""``."""
    from luna.errors import did_you_mean

    return did_you_mean(name, sorted(available_timezones()))


@functools.cache
def system_zone_name() -> str:
    """The system's IANA zone name, or ``"UTC"`` (said in the log) when it names none."""
    try:
        target = str(LOCALTIME.resolve())
    except OSError:
        target = ""
    if "/zoneinfo/" in target:
        name = target.split("/zoneinfo/", 1)[1]
        if is_zone_name(name):
            return name
    try:
        name = TIMEZONE_FILE.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        name = ""
    if is_zone_name(name):
        return name
    log.warning("the system names no time zone; using UTC (set agent.timezone)")
    return "UTC"


def zone_for(configured: str) -> ZoneInfo:
    """The zone ``agent.timezone`` names (validated at load), or the system's when empty."""
    return ZoneInfo(configured or system_zone_name())
