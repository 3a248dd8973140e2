"""Markdown as Telegram HTML, checked against the fake Bot API's parser (Telegram's rules),
and the offset bookkeeping, without a network."""

from __future__ import annotations

import pytest

from luna.frontends.telegram.offsets import Offsets
from luna.frontends.telegram.render import render, utf16_length
from tests.fakes.telegram_server import visible_text

HOSTILE = [
    "**never closed",
    "`stray backtick and <b>raw html</b> & an &amp; entity",
    "```py\nprint('<unclosed fence>')",
    "[link](javascript:alert(1)) [ok](https://example.org/?a=1&b=<2>)",
    "> quote\n> > nested quote\n\n- a\n  - b\n1. one\n2. two",
    "# Heading with *em* and ~~strike~~\n\n---\n\n<script>alert(1)</script>",
    "emoji 🎉 and \u202e bidi and \x00 nul",
    "",
]


@pytest.mark.parametrize("markdown", HOSTILE)
def test_render_output_is_html_telegram_accepts_showing_the_same_text(markdown: str) -> None:
    rendered = render(markdown)
    assert visible_text(rendered.html, "HTML") == rendered.text  # parses; no tag shows


def test_render_formats_and_escapes() -> None:
    r = render('**bold** _it_ `a<b` [x](https://e.org/?q=1&r="2")\n\n```py\n1 < 2\n```')
    assert r.html == (
        '<b>bold</b> <i>it</i> <code>a&lt;b</code> <a href="https://e.org/?q=1&amp;r=%222%22">'
        'x</a>\n\n<pre><code class="language-py">1 &lt; 2</code></pre>'
    )
    assert render("[x](javascript:alert(1))").html == "[x](javascript:alert(1))"


def test_render_counts_utf16_like_telegram() -> None:
    assert utf16_length("🎉a") == 3 and render("🎉" * 3).length == 6


def test_offsets_never_pass_an_unsettled_update() -> None:
    offsets = Offsets(10)
    assert not offsets.receive(9)  # below the saved offset: a replay
    assert offsets.receive(10) and offsets.receive(11) and offsets.receive(13)
    assert not offsets.receive(11)
    offsets.settle([11, 13])
    assert offsets.offset == 10  # 10's message is not committed yet
    offsets.settle([10])
    assert offsets.offset == 14
    assert not offsets.receive(13) and offsets.receive(14)
