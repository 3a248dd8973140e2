"""When tasks run: parse what people type, refuse what cannot work, compute the next run.

Invariants:
- Cron expressions are parsed and iterated by ``cronsim`` (five fields, in the task's zone,
  Debian-cron DST rules: a fixed time that a spring-forward skips runs at the first valid
  minute after it, one that a fall-back repeats runs once; ``*/N`` entries follow real time).
  Luna never parses cron itself; it only adds limits.
- An interval of whole days keeps the local wall-clock time across DST; shorter intervals are
  real elapsed time.
- Every refusal is a :class:`~luna.errors.ScheduleError` with one readable line: times and
  expressions must be ASCII, in the future, within ``max_horizon_days``; recurrences may not
  fire more often than ``min_interval`` (checked over the next firings, and around every
  clock change of the task's zone in the horizon); a cron that never fires in the horizon,
  or at all (``0 0 31 2 *``), is refused. A one-off up to a minute in the past is clamped to now.
- :func:`next_run` is pure: the first run strictly after a given instant, or None.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from zoneinfo import ZoneInfo

from cronsim import CronSim, CronSimError

from luna.errors import ScheduleError
from luna.scheduler.model import Schedule, TaskRequest, to_db

PAST_TOLERANCE_S = 60.0  # "at" this close behind now means now
GAP_CHECKS = 60  # firings inspected for the min_interval rule
DST_WINDOW_H = 26  # hours either side of a clock change inspected for it too
DST_YEARS = 2  # clock changes this far ahead are inspected (the rules repeat yearly)
_UNITS = {"w": 604_800, "d": 86_400, "h": 3_600, "m": 60, "s": 1}
_DURATION = re.compile(r"(\d{1,15})([wdhms])")
_LOCAL_FORMATS = ("%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S")


@dataclass(frozen=True)
class Limits:
    min_interval: float = 300.0
    max_horizon_days: int = 3650


def parse_duration(text: str, what: str = "duration") -> float:
    """``"1h30m"`` → 5400.0; units w, d, h, m, s; ScheduleError for anything else."""
    raw = text.strip().lower().replace(" ", "")
    if not raw or not raw.isascii():
        raise ScheduleError(f"{what} {text!r}: write it like 20m, 2h, 1h30m or 1d (ASCII)")
    if not re.fullmatch(r"(\d{1,15}[wdhms])+", raw):
        hint = " (say the unit: 90s or 90m)" if raw.isdigit() else ""
        raise ScheduleError(f"{what} {text!r}: write it like 20m, 2h, 1h30m or 1d{hint}")
    return float(sum(int(n) * _UNITS[u] for n, u in _DURATION.findall(raw)))


def _horizon(now: dt.datetime, limits: Limits) -> dt.datetime:
    return now + dt.timedelta(days=limits.max_horizon_days)


def localize(naive: dt.datetime, zone: ZoneInfo) -> dt.datetime:
    """A wall-clock time in ``zone`` as UTC: a repeated time means its first occurrence, a
    skipped one is moved forward by the gap (02:30 on a spring-forward night → 03:30)."""
    return naive.replace(tzinfo=zone, fold=0).astimezone(dt.UTC)


def parse_at(text: str, zone: ZoneInfo, now: dt.datetime, limits: Limits) -> dt.datetime:
    """A one-off time: local ``YYYY-MM-DD HH:MM[:SS]`` in ``zone``, or ISO with an offset."""
    raw = text.strip()
    if not raw.isascii():
        raise ScheduleError(f"time {text!r}: use ASCII digits, like 2026-12-01 09:00")
    when: dt.datetime | None = None
    for fmt in _LOCAL_FORMATS:
        try:
            when = localize(dt.datetime.strptime(raw, fmt), zone)
            break
        except ValueError:
            continue
        except OverflowError:
            raise ScheduleError(f"time {text!r} is out of range") from None
    if when is None:
        try:
            parsed = dt.datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            raise ScheduleError(
                f"time {text!r}: write it as YYYY-MM-DD HH:MM (your local time)"
            ) from None
        try:
            when = localize(parsed, zone) if parsed.tzinfo is None else parsed.astimezone(dt.UTC)
        except OverflowError:
            raise ScheduleError(f"time {text!r} is out of range") from None
    return _check_one_off(when, text, zone, now, limits)


def _check_one_off(
    when: dt.datetime, text: str, zone: ZoneInfo, now: dt.datetime, limits: Limits
) -> dt.datetime:
    if when < now - dt.timedelta(seconds=PAST_TOLERANCE_S):
        raise ScheduleError(
            f"{text!r} ({local_text(when, zone)}) is in the past; it is now {local_text(now, zone)}"
        )
    if when > _horizon(now, limits):
        raise ScheduleError(
            f"{text!r} is more than {limits.max_horizon_days} days ahead "
            "(scheduler.max_horizon_days)"
        )
    return max(when, now)


def parse_after(text: str, now: dt.datetime, limits: Limits, zone: ZoneInfo) -> dt.datetime:
    seconds = parse_duration(text, "delay")
    if seconds > limits.max_horizon_days * 86_400:
        raise ScheduleError(
            f"delay {text!r} is more than {limits.max_horizon_days} days "
            "(scheduler.max_horizon_days)"
        )
    return _check_one_off(now + dt.timedelta(seconds=seconds), text, zone, now, limits)


def check_cron(expr: str, zone: ZoneInfo, now: dt.datetime, limits: Limits) -> str:
    """The expression, normalized, if it fires within the horizon and not too often."""
    text = " ".join(expr.split())
    if not text.isascii():
        raise ScheduleError(f"cron {expr!r}: use ASCII, like '0 8 * * 1-5'")
    fields = text.split(" ")
    if len(fields) == 6:
        raise ScheduleError(
            f"cron {expr!r}: seconds are not supported; use five fields "
            "(minute hour day-of-month month day-of-week)"
        )
    if len(fields) != 5:
        raise ScheduleError(
            f"cron {expr!r}: needs five fields (minute hour day-of-month month day-of-week), "
            f"got {len(fields)}"
        )
    try:
        it = CronSim(text, now.astimezone(zone))
        first = next(it).astimezone(dt.UTC)
    except CronSimError as e:
        if _day_never_comes(fields):
            raise ScheduleError(
                f"cron {expr!r} never fires: none of its months has day {fields[2]}"
            ) from None
        raise ScheduleError(f"cron {expr!r}: {str(e).lower()} field") from None
    except StopIteration:
        raise ScheduleError(f"cron {expr!r} never fires") from None
    if first > _horizon(now, limits):
        raise ScheduleError(
            f"cron {expr!r} does not fire within {limits.max_horizon_days} days "
            "(scheduler.max_horizon_days)"
        )
    _check_gaps(expr, first, it, limits)
    # A clock change can bring two firings closer than any ordinary day does (1:59 and the
    # 3:01 after a spring-forward are 2 minutes apart): look at each one in the horizon too.
    horizon = min(_horizon(now, limits), now + dt.timedelta(days=DST_YEARS * 366))
    for change in clock_changes(zone, now, horizon):
        window = CronSim(text, (change - dt.timedelta(hours=DST_WINDOW_H)).astimezone(zone))
        try:
            start = next(window).astimezone(dt.UTC)
        except StopIteration:
            continue
        _check_gaps(expr, start, window, limits, until=change + dt.timedelta(hours=DST_WINDOW_H))
    return text


def _check_gaps(
    expr: str,
    previous: dt.datetime,
    it: CronSim,
    limits: Limits,
    until: dt.datetime | None = None,
) -> None:
    """Refuse when two of the next firings after ``previous`` (up to ``GAP_CHECKS`` of them,
    or until ``until``) are closer than ``min_interval``."""
    for _ in range(GAP_CHECKS if until is None else GAP_CHECKS * 10):
        try:
            nxt = next(it).astimezone(dt.UTC)
        except StopIteration:
            return
        gap = (nxt - previous).total_seconds()
        if 0 < gap < limits.min_interval:
            raise ScheduleError(
                f"cron {expr!r} fires every {_human_seconds(gap)}; the shortest allowed is "
                f"{_human_seconds(limits.min_interval)} (scheduler.min_interval)"
            )
        if until is not None and nxt > until:
            return
        previous = nxt


def clock_changes(zone: ZoneInfo, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    """The instants (UTC, to the hour) at which ``zone``'s offset changes in [start, end]."""
    changes = []
    step = dt.timedelta(hours=1)
    day = start.astimezone(dt.UTC).replace(minute=0, second=0, microsecond=0)
    offset = day.astimezone(zone).utcoffset()
    while day < end:  # a day at a time, then the hour within the day that changed
        nxt = day + dt.timedelta(days=1)
        if nxt.astimezone(zone).utcoffset() != offset:
            hour = day
            while hour.astimezone(zone).utcoffset() == offset:
                hour += step
            changes.append(hour)
            offset = hour.astimezone(zone).utcoffset()
        day = nxt
    return changes


def _day_never_comes(fields: list[str]) -> bool:
    """Whether a cron cronsim refused has a valid day-of-month that none of its months has
    (``0 0 31 2 *``): the expression is well-formed, it just never fires."""
    try:
        CronSim(" ".join([*fields[:3], "*", fields[4]]), dt.datetime(2000, 1, 1))
    except CronSimError:
        return False
    return True


def check_every(text: str, limits: Limits) -> float:
    seconds = parse_duration(text, "interval")
    if seconds < limits.min_interval:
        raise ScheduleError(
            f"interval {text!r} is shorter than {_human_seconds(limits.min_interval)} "
            "(scheduler.min_interval)"
        )
    if seconds > limits.max_horizon_days * 86_400:
        raise ScheduleError(f"interval {text!r} is longer than scheduler.max_horizon_days")
    return seconds


def build_schedule(
    req: TaskRequest, zone: ZoneInfo, now: dt.datetime, limits: Limits
) -> tuple[Schedule, dt.datetime]:
    """(schedule, first run in UTC) for a request with exactly one of at/after/cron/every."""
    ways = (("at", req.at), ("after", req.after), ("cron", req.cron), ("every", req.every))
    given = {k: v for k, v in ways if v is not None and str(v).strip()}
    if len(given) != 1:
        raise ScheduleError(
            "say when with exactly one of: at (a local time), after (a delay), cron, every "
            f"(got {', '.join(given) or 'none'})"
        )
    (how, value), name = next(iter(given.items())), zone.key
    if how in ("at", "after"):
        when = (
            parse_at(value, zone, now, limits)
            if how == "at"
            else parse_after(value, now, limits, zone)
        )
        return Schedule("once", to_db(when), name), when
    if how == "cron":
        schedule = Schedule("cron", check_cron(value, zone, now, limits), name)
    else:
        seconds = check_every(value, limits)
        anchor = now + dt.timedelta(seconds=seconds)
        schedule = Schedule("interval", f"{seconds:g}", name, anchor)
    first = next_run(schedule, now)
    if first is None:  # pragma: no cover - check_cron found one already
        raise ScheduleError(f"{how} {value!r} never fires")
    return schedule, first


def next_run(schedule: Schedule, after: dt.datetime) -> dt.datetime | None:
    """The first run of ``schedule`` strictly after ``after`` (UTC), or None."""
    zone = ZoneInfo(schedule.zone)
    if schedule.kind == "once":
        when = dt.datetime.fromisoformat(schedule.spec).astimezone(dt.UTC)
        return when if when > after else None
    if schedule.kind == "cron":
        try:
            for local in CronSim(schedule.spec, after.astimezone(zone)):
                when = local.astimezone(dt.UTC)
                if when > after:
                    return when
        except (CronSimError, OverflowError):
            return None
        return None
    anchor = schedule.anchor or after
    step = float(schedule.spec)
    if after < anchor:
        return anchor
    if step % 86_400 == 0:  # whole days: the same wall-clock time, whatever the offset does
        start = anchor.astimezone(zone).replace(tzinfo=None)
        days = int(step // 86_400)
        k = math.floor((after.astimezone(zone).replace(tzinfo=None) - start).days / days)
        for i in (k, k + 1, k + 2):
            when = localize(start + dt.timedelta(days=days * i), zone)
            if when > after:
                return when
        return None  # pragma: no cover - k + 2 always lies ahead
    k = math.floor((after - anchor).total_seconds() / step) + 1
    return anchor + dt.timedelta(seconds=k * step)


def count_runs_between(schedule: Schedule, start: dt.datetime, end: dt.datetime, cap: int) -> int:
    """How many runs fall in ``[start, end)``, counting at most ``cap``."""
    n, when = 0, start - dt.timedelta(microseconds=1)
    while n < cap:
        nxt = next_run(schedule, when)
        if nxt is None or nxt >= end:
            break
        n, when = n + 1, nxt
    return n


def local_text(when: dt.datetime, zone: ZoneInfo | str) -> str:
    z = ZoneInfo(zone) if isinstance(zone, str) else zone
    local = when.astimezone(z)
    return f"{local:%Y-%m-%d %H:%M} {local.tzname() or z.key}"


def describe(schedule: Schedule) -> str:
    """``"once at 2026-12-01 09:00 CET"``, ``"cron 0 8 * * 1-5 (Europe/Berlin)"``, …"""
    if schedule.kind == "once":
        return f"once at {local_text(dt.datetime.fromisoformat(schedule.spec), schedule.zone)}"
    if schedule.kind == "cron":
        return f"cron {schedule.spec} ({schedule.zone})"
    return f"every {_human_seconds(float(schedule.spec))}"


def _human_seconds(seconds: float) -> str:
    seconds = int(seconds)
    parts = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts) or "0s"
