"""Telegram's HTML parse mode as the Bot API applies it, for the fake Bot API server.

Invariants (https://core.telegram.org/bots/api#html-style): only Telegram's tags, properly
nested and closed; ``<``, ``>`` and ``&`` outside a tag or entity are refused; the entities
``&lt; &gt; &amp; &quot;`` and numeric ones are understood. Lengths are UTF-16 code units.
"""

from __future__ import annotations

import html
from html.parser import HTMLParser

_TAGS = {"b", "strong", "i", "em", "u", "ins", "s", "strike", "del", "code", "pre", "a",
         "blockquote", "tg-spoiler", "span"}  # fmt: skip


class EntityError(ValueError):
    pass


class _TelegramHTML(HTMLParser):
    """Telegram's HTML: known tags only, balanced; collects the visible text."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=False)
        self.stack: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _TAGS:
            raise EntityError(f'unsupported start tag "{tag}"')
        self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if not self.stack or self.stack[-1] != tag:
            raise EntityError(f'can\'t find end tag corresponding to start tag "{tag}"')
        self.stack.pop()

    def handle_data(self, data: str) -> None:
        if "<" in data or ">" in data or "&" in data:
            raise EntityError("unexpected end of name token")
        self.text.append(data)

    def handle_entityref(self, name: str) -> None:
        if name not in ("lt", "gt", "amp", "quot"):
            raise EntityError(f'unsupported HTML entity "&{name};"')
        self.text.append(html.unescape(f"&{name};"))

    def handle_charref(self, name: str) -> None:
        self.text.append(html.unescape(f"&#{name};"))


def visible_text(text: str, parse_mode: str | None) -> str:
    """The text a reader sees; EntityError when Telegram would refuse to parse it."""
    if parse_mode is None:
        return text
    if parse_mode != "HTML":
        raise EntityError(f"unsupported parse_mode {parse_mode}")
    parser = _TelegramHTML()
    parser.feed(text)
    parser.close()
    if parser.stack:
        raise EntityError(f'can\'t find end tag corresponding to start tag "{parser.stack[-1]}"')
    return "".join(parser.text)


def utf16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2
