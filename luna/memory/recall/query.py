"""Understanding a recall query: safe FTS5 text, mentioned dates, mentioned speakers.

Invariants:
- Any user text becomes a valid FTS5 query or None: every token is quoted, so punctuation,
  quotes, ``AND``/``OR``/``NOT``/``NEAR``, ``*`` and ``?`` are plain words; nothing raises.
  Stopwords are dropped unless nothing else is left.
- Dates written in the query ("on 8 May, 2023", "May 8, 2023", "in May 2023", "2023-05-08")
  become time windows; they are removed from the text the searches see (they are matched on
  the rows' dates instead), unless that would leave no words at all. Same for speaker names.
- Pure functions: no I/O.
"""

from __future__ import annotations

import calendar
import datetime as dt
import re
from dataclasses import dataclass, field

_TOKEN = re.compile(r"\w+", re.UNICODE)
STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves s t don didn doesn isn wasn weren won wouldn ll ve re d m o y ever also""".split()
)

_MONTHS = {m.lower(): i for i, m in enumerate(calendar.month_name) if m}
_MONTHS.update({m.lower(): i for i, m in enumerate(calendar.month_abbr) if m})
_MN = "|".join(sorted(_MONTHS, key=len, reverse=True))
_DAY_AFTER = dt.timedelta(days=8)  # an event is usually talked about in the days after it
_DAY_BEFORE = dt.timedelta(days=1)
_DATE_PATTERNS = [
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


@dataclass(frozen=True)
class QueryPlan:
    text: str  # the query without the date expressions and speaker names
    windows: list[tuple[str, str]] = field(default_factory=list)  # [start, end) ISO dates
    speakers: list[str] = field(default_factory=list)  # as recorded, matched case-insensitively


def query_terms(text: str) -> list[str]:
    """Distinct lowercase word tokens of ``text``, stopwords dropped unless that leaves none."""
    seen: dict[str, None] = {}
    for t in _TOKEN.findall(text or ""):
        t = t.lower()
        if t.strip("_"):
            seen.setdefault(t, None)
    words = list(seen)
    content = [w for w in words if w not in STOPWORDS]
    return content or words


def build_fts_query(text: str) -> str | None:
    """A safe FTS5 MATCH expression (OR of quoted terms), or None when there are no words."""
    terms = query_terms(text)
    if not terms:
        return None
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms[:64])


def _window(kind: str, m: re.Match[str]) -> tuple[dt.date, dt.date]:
    if kind == "my":
        year, month = int(m[2]), _MONTHS[m[1].lower()]
        start = dt.date(year, month, 1)
        end = dt.date(year + (month == 12), month % 12 + 1, 1)
        return start, end + _DAY_AFTER
    if kind == "dmy":
        day = dt.date(int(m[3]), _MONTHS[m[2].lower()], int(m[1]))
    elif kind == "mdy":
        day = dt.date(int(m[3]), _MONTHS[m[1].lower()], int(m[2]))
    else:
        day = dt.date(int(m[1]), int(m[2]), int(m[3]))
    return day - _DAY_BEFORE, day + _DAY_AFTER


def plan_query(text: str, known_speakers: list[str] | None = None) -> QueryPlan:
    """Split ``text`` into the words to search, date windows and mentioned speakers."""
    spans: list[tuple[int, int]] = []
    windows: list[tuple[str, str]] = []
    for pattern, kind in _DATE_PATTERNS:
        for m in pattern.finditer(text):
            if any(s <= m.start() < e for s, e in spans):
                continue
            try:
                start, end = _window(kind, m)
            except ValueError:
                continue
            windows.append((start.isoformat(), end.isoformat()))
            spans.append((m.start(), m.end()))
    rest = text
    for s, e in sorted(spans, reverse=True):
        rest = rest[:s] + " " + rest[e:]
    speakers = []
    lowered = set(query_terms(rest)) | {t.lower() for t in _TOKEN.findall(rest)}
    for name in known_speakers or []:
        if name and name.lower() in lowered:
            speakers.append(name)
            rest = re.sub(rf"\b{re.escape(name)}(?:'s|’s)?\b", " ", rest, flags=re.I)
    if not _TOKEN.search(rest):
        rest = text  # nothing left to search for: keep the words after all
    return QueryPlan(text=" ".join(rest.split()), windows=windows, speakers=speakers)
