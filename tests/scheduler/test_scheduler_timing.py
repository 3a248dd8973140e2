"""When tasks run: DST transitions in two zones, whole-day intervals, and hostile input."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from luna.errors import ScheduleError
from luna.scheduler.model import Schedule, TaskRequest
from luna.scheduler.timing import (
    Limits,
    build_schedule,
    count_runs_between,
    next_run,
    parse_duration,
)

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")
LIMITS = Limits(min_interval=300, max_horizon_days=3650)


def utc(*args: int) -> dt.datetime:
    return dt.datetime(*args, tzinfo=dt.UTC)


def runs(schedule: Schedule, after: dt.datetime, n: int) -> list[dt.datetime]:
    out = []
    for _ in range(n):
        nxt = next_run(schedule, after)
        assert nxt is not None
        out.append(nxt)
        after = nxt
    return out


def local(when: dt.datetime, zone: ZoneInfo) -> str:
    return when.astimezone(zone).strftime("%m-%d %H:%M %Z")


@pytest.mark.parametrize(
    ("zone", "spring_day", "fall_day"),
    [(BERLIN, (2026, 3, 27), (2026, 10, 23)), (NEW_YORK, (2026, 3, 6), (2026, 10, 30))],
)
def test_timing_daily_cron_keeps_local_time_across_both_dst_changes(
    zone: ZoneInfo, spring_day: tuple[int, int, int], fall_day: tuple[int, int, int]
) -> None:
    for day in (spring_day, fall_day):
        start = dt.datetime(*day, 12, 0, tzinfo=zone)
        schedule, first = build_schedule(
            TaskRequest("x", cron="0 8 * * *"), zone, start.astimezone(dt.UTC), LIMITS
        )
        got = [first, *runs(schedule, first, 3)]
        assert [w.astimezone(zone).strftime("%H:%M") for w in got] == ["08:00"] * 4
        offsets = {w.astimezone(zone).utcoffset() for w in got}
        assert len(offsets) == 2, "the run times must straddle the change"
        assert all(b - a in (dt.timedelta(hours=23), dt.timedelta(hours=25), dt.timedelta(
            hours=24)) for a, b in zip(got, got[1:], strict=False))  # fmt: skip


def test_timing_berlin_skipped_and_repeated_hour_run_once() -> None:
    schedule = Schedule("cron", "30 2 * * *", "Europe/Berlin")
    # 2026-03-29: 02:00 → 03:00. 02:30 does not exist: it runs once, at 03:00 CEST.
    spring = runs(schedule, utc(2026, 3, 28, 12), 2)
    assert [local(w, BERLIN) for w in spring] == ["03-29 03:00 CEST", "03-30 02:30 CEST"]
    # 2026-10-25: 03:00 → 02:00. 02:30 happens twice: it runs once, the first time.
    fall = runs(schedule, utc(2026, 10, 24, 12), 2)
    assert [local(w, BERLIN) for w in fall] == ["10-25 02:30 CEST", "10-26 02:30 CET"]


def test_timing_new_york_repeated_hour_every_30_minutes_follows_real_time() -> None:
    # 2026-11-01: 02:00 EDT → 01:00 EST. */30 fires at every real half hour: 01:00 and 01:30
    # twice (EDT, then EST), never two runs at one instant.
    schedule = Schedule("cron", "*/30 * * * *", "America/New_York")
    got = runs(schedule, utc(2026, 11, 1, 4, 10), 6)  # 00:10 EDT
    assert [local(w, NEW_YORK) for w in got] == [
        "11-01 00:30 EDT",
        "11-01 01:00 EDT",
        "11-01 01:30 EDT",
        "11-01 01:00 EST",
        "11-01 01:30 EST",
        "11-01 02:00 EST",
    ]
    assert all((b - a) == dt.timedelta(minutes=30) for a, b in zip(got, got[1:], strict=False))
    # Spring forward (2026-03-08 02:00 → 03:00): the missing half hours are skipped.
    spring = runs(schedule, utc(2026, 3, 8, 6, 10), 3)  # 01:10 EST
    assert [local(w, NEW_YORK) for w in spring] == [
        "03-08 01:30 EST",
        "03-08 03:00 EDT",
        "03-08 03:30 EDT",
    ]


def test_timing_whole_day_interval_keeps_wall_clock_shorter_ones_real_time() -> None:
    now = utc(2026, 3, 27, 7)  # 08:00 CET, two days before spring forward
    daily, first = build_schedule(TaskRequest("x", every="1d"), BERLIN, now, LIMITS)
    got = [first, *runs(daily, first, 3)]
    assert [local(w, BERLIN) for w in got] == [
        "03-28 08:00 CET",
        "03-29 08:00 CEST",
        "03-30 08:00 CEST",
        "03-31 08:00 CEST",
    ]
    hourly, first = build_schedule(
        TaskRequest("x", every="1h"), NEW_YORK, utc(2026, 11, 1, 4, 30), LIMITS
    )
    got = [first, *runs(hourly, first, 3)]
    assert [local(w, NEW_YORK) for w in got] == [
        "11-01 01:30 EDT",
        "11-01 01:30 EST",
        "11-01 02:30 EST",
        "11-01 03:30 EST",
    ]


def test_timing_one_off_in_a_skipped_hour_moves_forward_and_ambiguous_takes_the_first() -> None:
    now = utc(2026, 3, 1)
    _, when = build_schedule(TaskRequest("x", at="2026-03-29 02:30"), BERLIN, now, LIMITS)
    assert local(when, BERLIN) == "03-29 03:30 CEST"
    _, when = build_schedule(TaskRequest("x", at="2026-11-01 01:30"), NEW_YORK, now, LIMITS)
    assert local(when, NEW_YORK) == "11-01 01:30 EDT"
    _, when = build_schedule(TaskRequest("x", at="2026-03-29T09:00+00:00"), BERLIN, now, LIMITS)
    assert when == utc(2026, 3, 29, 9)  # an explicit offset wins over the zone


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (TaskRequest("x", cron="0 0 30 2 *"), r"cron '0 0 30 2 \*' never fires: none of its"),
        (TaskRequest("x", cron="0 0 31 4,6,9,11 *"), "never fires: none of its months has day 31"),
        (TaskRequest("x", cron="0 0 32 * *"), "bad day-of-month"),
        (TaskRequest("x", cron="* * * * * *"), "seconds are not supported"),
        (TaskRequest("x", cron="* * * * *"), r"fires every 1m; the shortest allowed is 5m"),
        (TaskRequest("x", cron="*/2 9 * * *"), "fires every 2m"),
        (TaskRequest("x", cron="0 8 * *"), "needs five fields"),
        (TaskRequest("x", cron="0 8 * * Mön"), "use ASCII"),
        (TaskRequest("x", every="1s"), r"interval '1s' is shorter than 5m"),
        (TaskRequest("x", every="90"), "say the unit"),
        (TaskRequest("x", every="999999999999w"), "longer than scheduler.max_horizon_days"),
        (TaskRequest("x", at="1970-01-01 00:00"), r"is in the past; it is now 2026-12-01"),
        (TaskRequest("x", at="9999-12-31 23:59"), "more than 3650 days ahead"),
        (TaskRequest("x", at="9999-12-31T23:59-12:00"), "out of range"),
        (TaskRequest("x", at="٢٠٢٦-١٢-٠٢ ٠٩:٠٠"), "use ASCII digits"),
        (TaskRequest("x", at="tomorrow at nine"), "write it as YYYY-MM-DD HH:MM"),
        (TaskRequest("x", after="99999999999d"), "more than 3650 days"),
        (TaskRequest("x", after="zwanzig Minuten"), "write it like 20m"),
        (TaskRequest("x"), r"exactly one of: at .* \(got none\)"),
        (TaskRequest("x", at="2027-01-01 09:00", every="1d"), r"\(got at, every\)"),
    ],
)
def test_timing_hostile_input_is_refused_in_one_line(request_: TaskRequest, message: str) -> None:
    with pytest.raises(ScheduleError, match=message) as info:
        build_schedule(request_, BERLIN, utc(2026, 12, 1, 7), LIMITS)
    assert "\n" not in str(info.value)


def test_timing_clamps_a_time_just_past_to_now_and_never_fires_twice_per_instant() -> None:
    now = utc(2026, 12, 1, 7, 0, 30)
    _, when = build_schedule(TaskRequest("x", at="2026-12-01 08:00"), BERLIN, now, LIMITS)
    assert when == now  # 30 s late: now, not a refusal
    once = Schedule("once", "2026-12-01T07:00:30.000+00:00", "Europe/Berlin")
    assert next_run(once, now) is None and next_run(once, now - dt.timedelta(seconds=1)) == now


def test_timing_rare_but_real_cron_is_accepted_and_missed_periods_are_counted() -> None:
    schedule, first = build_schedule(
        TaskRequest("x", cron="0 9 29 2 *"), BERLIN, utc(2026, 12, 1), LIMITS
    )
    assert local(first, BERLIN) == "02-29 09:00 CET" and first.year == 2028
    daily = Schedule("cron", "0 8 * * *", "Europe/Berlin")
    assert count_runs_between(daily, utc(2026, 12, 1, 7), utc(2026, 12, 11, 7), cap=1000) == 10
    every5 = Schedule("cron", "*/5 * * * *", "Europe/Berlin")
    assert count_runs_between(every5, utc(2026, 1, 1), utc(2026, 12, 1), cap=1000) == 1000


def test_timing_parse_duration_units() -> None:
    assert parse_duration("1h30m") == 5400
    assert parse_duration("1w 2d") == 9 * 86400
    assert parse_duration("45S") == 45
