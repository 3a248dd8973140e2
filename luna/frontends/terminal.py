"""What the REPL may send to a terminal: text with every control neutralized, Luna's own colours.

Model replies, tool arguments, memories and scheduled results are text from elsewhere; a
terminal obeys the control characters inside them (clear the screen, set the window title,
write the clipboard with OSC 52, redraw the line with CR). :func:`neutralize` makes them
visible instead, one character at a time, so a sequence split across stream deltas is
neutralized too.

Invariants:
- ``neutralize`` (owned by ``luna.messages``) leaves no C0 control but ``\\n`` and ``\\t``,
  no DEL, no C1 control and no lone surrogate: ESC becomes ``␛`` (U+241B), every other C0
  control its Control Picture (``␇``, ``␍``, ...), DEL ``␡``, a C1 control the text
  ``\\x9b``, a lone surrogate U+FFFD. Nothing is dropped; everything else passes unchanged.
- The only escape sequences the REPL writes are the SGR colour codes of :class:`Palette`
  (and the line redraw of a scheduled result), around text that was neutralized first.
- Colour is off unless the output is a terminal, and off when ``NO_COLOR`` is set (the
  loader reads it into ``Config.no_color``).
"""

from __future__ import annotations

from typing import TextIO

from luna.messages import neutralize

__all__ = ["Palette", "neutralize"]


# SGR codes for Luna's own lines; nothing else is ever emitted raw.
STYLES = {
    "tool": "\x1b[36m",  # cyan
    "status": "\x1b[2m",  # dim
    "error": "\x1b[31m",  # red
    "prompt": "\x1b[1m",  # bold
}
RESET = "\x1b[0m"


class Palette:
    """Wraps neutralized text in Luna's colours, or leaves it plain."""

    def __init__(self, is_enabled: bool) -> None:
        self.is_enabled = is_enabled

    @classmethod
    def for_stream(cls, stream: TextIO, *, no_color: bool) -> Palette:
        """Colour only on a terminal and only when ``NO_COLOR`` is not set."""
        try:
            is_tty = stream.isatty()
        except (AttributeError, ValueError):  # a closed or unusual stream
            is_tty = False
        return cls(is_tty and not no_color)

    def paint(self, style: str, text: str) -> str:
        """``text`` neutralized, in ``style`` when colour is on (newlines around it uncoloured)."""
        safe = neutralize(text)
        if not self.is_enabled or not safe.strip():
            return safe
        body = safe.strip("\n")
        start = safe.index(body)
        return f"{safe[:start]}{STYLES[style]}{body}{RESET}{safe[start + len(body) :]}"
