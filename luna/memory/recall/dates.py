"""When a question points in time: date expressions in a query become windows of row dates.

Invariants:
- Explicit dates ("on 8 May, 2023", "May 8, 2023", "2023-05-08", "in mid-August 2023") always
  resolve. Relative ones ("yesterday", "last week", "three days ago", "in May", "last
  Tuesday") resolve against ``today`` (the day the question is asked), and only when the query
  names no explicit date: "last weekend before April 10, 2023" is anchored by its date, not by
  today.
- A window is ``[start, end)`` in ISO dates: the days the event may have happened, from a day
  before the first (time zones) to ``DAYS_AFTER`` days after the last (people talk about an
  event in the days after it); a relative window never reaches past tomorrow.
- A month named without a year ("in May") is the latest such month that has begun by
  ``today``. A bare "may"/"march" is a verb unless a preposition or "last"/"this"/"early"…
  comes before it.
- Each returned span is the expression's place in the text, so the caller can take it out of
  the words searched. Pure functions: no clock, no I/O.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from collections.abc import Callable
from typing import Any

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m})
_MN = "|".join(sorted(_MONTHS, key=len, reverse=True))
_WEEKDAYS = {d.lower(): i for i, d in enumerate(calendar.day_name)}
_WD = "|".join(_WEEKDAYS)
_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "a couple of": 2, "a few": 3, "few": 3,
    "several": 4,
}  # fmt: skip
_COUNT = "|".join(sorted(_NUMBERS, key=len, reverse=True)) + r"|\d{1,3}"
DAYS_AFTER = 8  # an event is usually talked about in the days after it
DAYS_BEFORE = 1
_DAY = dt.timedelta(days=1)

Span = tuple[int, int]
Window = tuple[str, str]
Days = tuple[dt.date, dt.date]  # first and last day the event may have happened

_EXPLICIT = [
    (
        re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MN})\.?,?\s+(\d{{4}})\b", re.I),
        "dmy",
    ),
    (re.compile(rf"\b({_MN})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?,?\s+(\d{{4}})\b", re.I), "mdy"),
    (re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b"), "iso"),
    (
        re.compile(rf"\b(?:(?:early|mid|late)[-\s]+)?({_MN})\.?,?\s+(?:of\s+)?(\d{{4}})\b", re.I),
        "my",
    ),
]


def _month_days(year: int, month: int) -> Days:
    return dt.date(year, month, 1), dt.date(year, month, calendar.monthrange(year, month)[1])


def _explicit_days(kind: str, m: re.Match[str]) -> Days:
    if kind == "my":
        return _month_days(int(m[2]), _MONTHS[m[1].lower()])
    if kind == "dmy":
        day = dt.date(int(m[3]), _MONTHS[m[2].lower()], int(m[1]))
    elif kind == "mdy":
        day = dt.date(int(m[3]), _MONTHS[m[1].lower()], int(m[2]))
    else:
        day = dt.date(int(m[1]), int(m[2]), int(m[3]))
    return day, day


# ---- relative to today ----------------------------------------------------------------------


def _week_of(day: dt.date) -> Days:
    monday = day - dt.timedelta(days=day.weekday())
    return monday, monday + dt.timedelta(days=6)


def _last_month(today: dt.date) -> Days:
    first = today.replace(day=1) - _DAY
    return _month_days(first.year, first.month)


def _named_month(m: re.Match[str], today: dt.date) -> Days:
    month = _MONTHS[m["month"].lower()]
    year = today.year if month <= today.month else today.year - 1
    if (m["which"] or "").lower() == "last" and month == today.month:
        year -= 1  # "last May" said in May: a year ago
    return _month_days(year, month)


def _weekday(m: re.Match[str], today: dt.date) -> Days:
    back = (today.weekday() - _WEEKDAYS[m["day"].lower()]) % 7 or 7  # the latest one before today
    day = today - dt.timedelta(days=back)
    return day, day


def _ago(m: re.Match[str], today: dt.date) -> Days:
    raw = m["n"].lower()
    n = int(raw) if raw.isdigit() else _NUMBERS[" ".join(raw.split())]
    unit = {"day": 1, "week": 7, "month": 30}[m["unit"].lower()]
    slack = dt.timedelta(days=unit)  # "three weeks ago" is rarely exactly 21 days
    center = today - dt.timedelta(days=n * unit)
    return center - slack, center + slack


_RELATIVE: list[tuple[re.Pattern[str], Callable[[re.Match[str], dt.date], Days]]] = [
    (re.compile(r"\b(?:the\s+)?day\s+before\s+yesterday\b", re.I),
     lambda m, t: (t - 2 * _DAY, t - 2 * _DAY)),
    (re.compile(r"\byesterday\b", re.I), lambda m, t: (t - _DAY, t - _DAY)),
    (re.compile(r"\b(?:today|tonight|this\s+(?:morning|afternoon|evening))\b", re.I),
     lambda m, t: (t, t)),
    (re.compile(r"\blast\s+weekend\b", re.I),
     lambda m, t: (_week_of(t - 7 * _DAY)[1] - _DAY, _week_of(t - 7 * _DAY)[1])),
    (re.compile(r"\bthis\s+weekend\b", re.I),
     lambda m, t: (_week_of(t)[1] - _DAY, _week_of(t)[1])),
    (re.compile(r"\blast\s+week\b", re.I), lambda m, t: _week_of(t - 7 * _DAY)),
    (re.compile(r"\bthis\s+week\b", re.I), lambda m, t: (_week_of(t)[0], t)),
    (re.compile(r"\blast\s+month\b", re.I), lambda m, t: _last_month(t)),
    (re.compile(r"\bthis\s+month\b", re.I), lambda m, t: (t.replace(day=1), t)),
    (re.compile(r"\blast\s+year\b", re.I),
     lambda m, t: (dt.date(t.year - 1, 1, 1), dt.date(t.year - 1, 12, 31))),
    (re.compile(r"\bthis\s+year\b", re.I), lambda m, t: (dt.date(t.year, 1, 1), t)),
    (re.compile(rf"\b(?P<n>{_COUNT})\s+(?P<unit>day|week|month)s?\s+ago\b", re.I), _ago),
    (re.compile(rf"\b(?:last|on|this\s+past)\s+(?P<day>{_WD})\b", re.I), _weekday),
    (
        re.compile(
            rf"\b(?:(?P<which>last|this)|in|during|since|early|mid|late|of)[-\s]+"
            rf"(?:(?:early|mid|late)[-\s]+)?(?P<month>{_MN})\b\.?",
            re.I,
        ),
        _named_month,
    ),
]  # fmt: skip


def _as_window(days: Days, today: dt.date | None) -> Window:
    start, end = days[0] - DAYS_BEFORE * _DAY, days[1] + DAYS_AFTER * _DAY
    if today is not None:
        end = min(end, today + 2 * _DAY)  # nothing was said after tomorrow
    return start.isoformat(), end.isoformat()


def date_windows(text: str, today: dt.date | None = None) -> tuple[list[Window], list[Span]]:
    """The windows of row dates ``text`` points at, and where in ``text`` each expression is.

    Without ``today`` only explicit dates resolve.
    """
    spans: list[Span] = []
    windows: list[Window] = []
    # Every explicit date, resolved or not, and every relative one: a relative expression never
    # re-reads a piece of them ("December" of "in December 9999" is not this December). An
    # explicit date that fails ("31 February, 2023") is still open to a wider explicit pattern
    # ("February, 2023").
    claimed: list[Span] = []

    def read(
        patterns: list[tuple[re.Pattern[str], Any]],
        blocked: list[Span],
        days_of: Callable[[Any, re.Match[str]], Days],
        cap: dt.date | None,
    ) -> None:
        """Each match of ``patterns`` not overlapping ``blocked`` becomes a window (capped at
        ``cap``, the day asked), or stays words when it is no date."""
        for pattern, how in patterns:
            for m in pattern.finditer(text):
                if any(s < m.end() and m.start() < e for s, e in blocked):
                    continue
                claimed.append((m.start(), m.end()))
                try:
                    window = _as_window(days_of(how, m), cap)
                except (ValueError, OverflowError):  # "31 February, 2023"; "1 January 0001"
                    continue
                windows.append(window)
                spans.append((m.start(), m.end()))

    read(_EXPLICIT, spans, _explicit_days, None)
    if today is not None and not windows:
        read(_RELATIVE, claimed, lambda resolve, m: resolve(m, today), today)
    return windows, spans
