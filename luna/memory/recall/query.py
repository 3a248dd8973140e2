"""Understanding a recall query: safe FTS5 text, mentioned dates, mentioned speakers.

Invariants:
- Any user text becomes a valid FTS5 query or None: every token is quoted, so punctuation,
  quotes, ``AND``/``OR``/``NOT``/``NEAR``, ``*`` and ``?`` are plain words; nothing raises.
  Stopwords are dropped unless nothing else is left.
- Dates in the query (explicit, or relative to ``today``: :mod:`luna.memory.recall.dates`)
  become time windows; they are removed from the text the searches see (they are matched on
  the rows' dates instead), unless that would leave no words at all. Same for speaker names.
- Pure functions: no I/O.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass, field

from luna.memory.recall.dates import date_windows

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


def plan_query(
    text: str, known_speakers: list[str] | None = None, today: dt.date | None = None
) -> QueryPlan:
    """Split ``text`` into the words to search, date windows and mentioned speakers.

    ``today`` resolves relative dates ("last week", "in May"); see :mod:`.dates`.
    """
    windows, spans = date_windows(text, today)
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
