"""Split a reply into messages of a chat app's size.

Job: turn one reply text into chunks that the app accepts (at most ``limit`` characters each;
``DEFAULT_LIMIT`` is Discord's 2,000, the smallest of the apps').

Invariants:
- Every chunk is at most ``limit`` characters and contains something other than whitespace.
- Cuts prefer a paragraph break, then a line break, then a space; a run without any of them
  (a 10,000-character URL) is hard-split, so the loop always advances and always terminates.
- Code fences stay balanced: a chunk that ends inside a ``` block is closed with ``\\n```\\``,
  and the next chunk reopens it with the same language (```` ```py ````). A cut never falls
  inside a ``` marker. An unclosed fence at the very end of the text is closed too.
- Nothing is lost: the chunks' bodies (chunk minus the added fence lines) are consecutive
  slices of the input; only the single separator character(s) at each cut (``\\n\\n``, ``\\n``
  or a space) and whitespace-only chunks are dropped.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass

DEFAULT_LIMIT = 2000
MIN_LIMIT = 64
FENCE = "```"
CLOSE = "\n```"
_LANG = re.compile(r"[A-Za-z0-9_+#.\-]{1,32}(?=\n|$)")


@dataclass(frozen=True)
class Piece:
    """One chunk before assembly: ``prefix + body + suffix`` (prefix/suffix are added fences)."""

    prefix: str
    body: str
    suffix: str
    start: int  # offset of ``body`` in the input

    @property
    def text(self) -> str:
        return self.prefix + self.body + self.suffix


class _Fences:
    """Positions of ``` markers in the text, and the open/closed state at any offset."""

    def __init__(self, text: str) -> None:
        self.starts: list[int] = []
        # open_lang[i]: language of the block open *after* marker i, or None when closed.
        self.open_lang: list[str | None] = []
        lang: str | None = None
        for m in re.finditer(re.escape(FENCE), text):
            if lang is None:
                match = _LANG.match(text, m.end())
                lang = match.group() if match else ""
            else:
                lang = None
            self.starts.append(m.start())
            self.open_lang.append(lang)

    def state_at(self, pos: int) -> str | None:
        """Language of the block open at offset ``pos`` (markers wholly before it), or None."""
        i = bisect.bisect_right(self.starts, pos - len(FENCE)) - 1
        return self.open_lang[i] if i >= 0 else None

    def straddled(self, pos: int) -> int | None:
        """Start of a marker that a cut at ``pos`` would split, if any."""
        i = bisect.bisect_right(self.starts, pos - 1) - 1
        if i >= 0 and self.starts[i] < pos < self.starts[i] + len(FENCE):
            return self.starts[i]
        return None


def _choose_cut(text: str, start: int, budget: int, fences: _Fences) -> tuple[int, int]:
    """Return (cut, skip): the body ends at ``cut``; the next body starts at ``cut + skip``."""
    window = text[start : start + budget]
    for min_index in (budget // 2, 1):
        for sep in ("\n\n", "\n", " "):
            idx = window.rfind(sep)
            if idx >= min_index:
                return start + idx, len(sep)
    cut = start + budget
    marker = fences.straddled(cut)
    if marker is not None:
        cut = marker if marker > start else marker + len(FENCE)
    return cut, 0


def split_pieces(text: str, limit: int = DEFAULT_LIMIT) -> list[Piece]:
    """The chunks of :func:`split_message` with their added fence lines kept apart."""
    if limit < MIN_LIMIT:
        raise ValueError(f"limit must be at least {MIN_LIMIT}, got {limit}")
    fences = _Fences(text)
    pieces: list[Piece] = []
    start = 0
    n = len(text)
    while start < n:
        lang = fences.state_at(start)
        prefix = f"{FENCE}{lang}\n" if lang is not None else ""
        end_lang = fences.state_at(n)
        tail_suffix = CLOSE if end_lang is not None else ""
        if len(prefix) + (n - start) + len(tail_suffix) <= limit:
            cut, skip = n, 0
        else:
            budget = limit - len(prefix) - len(CLOSE)
            cut, skip = _choose_cut(text, start, budget, fences)
        body = text[start:cut]
        suffix = CLOSE if fences.state_at(cut) is not None else ""
        if body.strip():
            pieces.append(Piece(prefix, body, suffix, start))
        start = cut + skip
    return pieces


def split_message(text: str, limit: int = DEFAULT_LIMIT) -> list[str]:
    """Split ``text`` into chunks of at most ``limit`` characters (see module invariants)."""
    return [p.text for p in split_pieces(text, limit)]
