"""The model's Markdown as Telegram HTML that no text can break.

Job: :func:`render` parses Markdown (markdown-it, CommonMark with strikethrough, raw HTML off)
and writes Telegram's HTML subset (``<b> <i> <s> <code> <pre> <a> <blockquote>``) with every
piece of text escaped, plus the text a reader sees, whose length Telegram limits.

Invariants:
- Tags are written only in matched pairs, by the renderer itself; every character of the
  input reaches the output as escaped text (``& < >``, and ``"`` in an attribute), so
  unbalanced or hostile Markdown (``**``, ``<b>``, a stray backtick) renders as the
  characters typed, never as a message Telegram refuses.
- Links are kept only for ``http``, ``https``, ``tg`` and ``mailto``; any other link shows
  its text. Blockquotes are not nested (Telegram refuses that); inner ones are plain.
- :attr:`Rendered.length` counts UTF-16 code units of the visible text, as Telegram does.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from markdown_it import MarkdownIt
from markdown_it.token import Token

_MD = MarkdownIt("commonmark", {"html": False}).enable("strikethrough")
_SAFE_LANG = re.compile(r"[A-Za-z0-9_+\-]{1,32}")
_LINK_SCHEMES = ("http://", "https://", "tg://", "mailto:")
_INLINE_TAGS = {"strong": "b", "em": "i", "s": "s"}
_BLOCK_ENDS = {"paragraph_close", "heading_close", "bullet_list_close", "ordered_list_close",
               "blockquote_close"}  # fmt: skip


@dataclass(frozen=True)
class Rendered:
    html: str  # what is sent (with parse_mode HTML when ``is_html``)
    text: str  # what a reader sees
    is_html: bool = True

    @property
    def length(self) -> int:
        return utf16_length(self.text)


def utf16_length(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


@dataclass
class _Writer:
    html: list[str] = field(default_factory=list)
    text: list[str] = field(default_factory=list)
    pending: str = ""  # separator owed before the next content
    lists: list[list[int | None]] = field(default_factory=list)  # per list: [next number]
    quote_depth: int = 0
    links: list[bool] = field(default_factory=list)  # per open link: was a tag written

    def put(self, visible: str) -> None:
        if self.pending and self.text:
            self.html.append(self.pending)
            self.text.append(self.pending)
        self.pending = ""
        self.html.append(html.escape(visible, quote=False))
        self.text.append(visible)

    def tag(self, markup: str) -> None:
        if self.pending and self.text:
            self.html.append(self.pending)
            self.text.append(self.pending)
        self.pending = ""
        self.html.append(markup)

    def owe(self, separator: str) -> None:
        if self.text and len(separator) > len(self.pending):
            self.pending = separator


def _inline(w: _Writer, tokens: list[Token]) -> None:
    for t in tokens:
        kind = t.type
        if kind == "text":
            w.put(t.content)
        elif kind in ("softbreak", "hardbreak"):
            w.put("\n")
        elif kind == "code_inline":
            w.tag("<code>")
            w.put(t.content)
            w.tag("</code>")
        elif kind.endswith("_open") and kind[:-5] in _INLINE_TAGS:
            w.tag(f"<{_INLINE_TAGS[kind[:-5]]}>")
        elif kind.endswith("_close") and kind[:-6] in _INLINE_TAGS:
            w.tag(f"</{_INLINE_TAGS[kind[:-6]]}>")
        elif kind == "link_open":
            href = str(t.attrs.get("href", ""))
            ok = href.lower().startswith(_LINK_SCHEMES) and not w.links
            w.links.append(ok)
            if ok:
                w.tag(f'<a href="{html.escape(href, quote=True)}">')
        elif kind == "link_close":
            if w.links.pop():
                w.tag("</a>")
        elif kind == "image":
            w.put(t.content or "image")
        else:  # html_inline and anything new: its source, as text
            w.put(t.content)


def _block(w: _Writer, t: Token) -> None:
    kind = t.type
    if kind == "inline":
        _inline(w, t.children or [])
    elif kind == "heading_open":
        w.tag("<b>")
    elif kind == "heading_close":
        w.tag("</b>")
    elif kind in ("fence", "code_block"):
        lang = t.info.strip().split(" ")[0] if kind == "fence" else ""
        cls = f' class="language-{lang}"' if _SAFE_LANG.fullmatch(lang) else ""
        w.tag(f"<pre><code{cls}>")
        w.put(t.content.rstrip("\n") or " ")
        w.tag("</code></pre>")
        w.owe("\n\n")
    elif kind == "hr":
        w.put("———")
        w.owe("\n\n")
    elif kind in ("bullet_list_open", "ordered_list_open"):
        start = int(t.attrs.get("start", 1) or 1) if kind == "ordered_list_open" else None
        w.lists.append([start])
    elif kind == "list_item_open":
        numbering: list[int | None] = w.lists[-1] if w.lists else [None]
        number = numbering[0]
        bullet = "•" if number is None else f"{number}."
        if number is not None:
            numbering[0] = number + 1
        w.owe("\n")
        w.put("  " * (len(w.lists) - 1) + bullet + " ")
        w.pending = ""
    elif kind == "list_item_close":
        w.owe("\n")
    elif kind == "blockquote_open":
        w.quote_depth += 1
        if w.quote_depth == 1:
            w.tag("<blockquote>")
    elif kind == "blockquote_close":
        w.quote_depth -= 1
        if w.quote_depth == 0:
            w.pending = ""
            w.tag("</blockquote>")
    if kind in ("bullet_list_close", "ordered_list_close") and w.lists:
        w.lists.pop()
    if kind in _BLOCK_ENDS:
        w.owe("\n" if w.lists else "\n\n")


def render(markdown: str) -> Rendered:
    """``markdown`` as Telegram HTML and as the text a reader sees (module invariants)."""
    w = _Writer()
    for token in _MD.parse(markdown):
        _block(w, token)
    return Rendered("".join(w.html), "".join(w.text))


def plain(markdown: str) -> Rendered:
    """The text as it is, for a message sent without formatting."""
    return Rendered(markdown, markdown, is_html=False)
