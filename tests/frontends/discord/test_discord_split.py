"""Fuzz and example tests for luna.discord_split (pure function, no Discord needed)."""

from __future__ import annotations

import bisect
import functools
import random
import re

import pytest

from luna.frontends.channels.split import CLOSE, FENCE, split_message, split_pieces

LANG = re.compile(r"[A-Za-z0-9_+#.\-]{1,32}(?=\n|$)")


@functools.lru_cache(maxsize=2)
def _fences(text: str) -> tuple[list[int], list[str | None]]:
    """Independent scan, once per text: where each fence ends, and the language of the code
    block open after it (None: none open)."""
    ends: list[int] = []
    langs: list[str | None] = []
    lang: str | None = None
    for m in re.finditer(re.escape(FENCE), text):
        if lang is None:
            found = LANG.match(text, m.end())
            lang = found.group() if found else ""
        else:
            lang = None
        ends.append(m.end())
        langs.append(lang)
    return ends, langs


def open_lang_at(text: str, pos: int) -> str | None:
    """Language of the code block open at offset ``pos`` (after the fences ending by it)."""
    ends, langs = _fences(text)
    passed = bisect.bisect_right(ends, pos)
    return langs[passed - 1] if passed else None


def check(text: str, limit: int = 2000) -> list[str]:
    pieces = split_pieces(text, limit)
    chunks = split_message(text, limit)
    assert chunks == [p.text for p in pieces]
    pos = 0
    for p, chunk in zip(pieces, chunks, strict=True):
        assert len(chunk) <= limit
        assert chunk.strip()
        assert chunk.count(FENCE) % 2 == 0, f"unbalanced fences in chunk: {chunk[:200]!r}"
        # body is the next slice of the input; only whitespace was dropped in between
        assert text[pos : p.start].strip() == "", "non-whitespace text was dropped"
        assert text[p.start : p.start + len(p.body)] == p.body
        pos = p.start + len(p.body)
        # added fence lines reopen with the language open in the input at that point
        lang = open_lang_at(text, p.start)
        assert p.prefix == (f"{FENCE}{lang}\n" if lang is not None else "")
        end_lang = open_lang_at(text, pos)
        assert p.suffix == (CLOSE if end_lang is not None else "")
    assert text[pos:].strip() == ""
    return chunks


def test_split_short_text_is_one_chunk():
    assert split_message("hello") == ["hello"]
    assert split_message("") == []
    assert split_message("   \n ") == []


def test_split_prefers_paragraph_then_line_then_word():
    para = "a" * 1200 + "\n\n" + "b" * 1200
    assert split_message(para) == ["a" * 1200, "b" * 1200]
    lines = "a" * 1200 + "\n" + "b" * 1200
    assert split_message(lines) == ["a" * 1200, "b" * 1200]
    words = ("word " * 600).strip()
    chunks = check(words)
    assert all(not c.startswith(" ") and c.endswith("word") for c in chunks)


def test_split_long_unbroken_url_terminates():
    url = "https://example.com/" + "x" * 9980
    chunks = check(url)
    assert "".join(chunks) == url
    assert len(chunks) == 6


def test_split_code_fence_reopened_with_language():
    code = "intro\n```python\n" + "\n".join(f"print({i})" for i in range(400)) + "\n```\nafter"
    chunks = check(code)
    assert len(chunks) >= 2
    assert chunks[0].endswith("\n```")
    assert chunks[1].startswith("```python\n")
    assert chunks[-1].endswith("after")


def test_split_unclosed_fence_is_closed():
    chunks = check("```js\nlet x = 1;")
    assert chunks == ["```js\nlet x = 1;\n```"]


def test_split_rejects_tiny_limit():
    with pytest.raises(ValueError):
        split_message("x", limit=10)


def _random_text(rng: random.Random) -> str:
    parts = []
    for _ in range(rng.randint(1, 40)):
        kind = rng.random()
        if kind < 0.25:
            lang = rng.choice(["", "py", "python", "js", "c++", "sh", "x" * 40])
            body = "\n".join(
                " " * rng.randint(0, 8) + "".join(rng.choices("abc ()=`\t", k=rng.randint(0, 120)))
                for _ in range(rng.randint(0, 80))
            )
            close = rng.random() < 0.9
            parts.append(f"```{lang}\n{body}" + ("\n```" if close else ""))
        elif kind < 0.4:
            parts.append("".join(rng.choices("abcdef/:.?=%", k=rng.randint(100, 5000))))
        elif kind < 0.5:
            parts.append("`" * rng.randint(1, 7))
        else:
            words = [
                "".join(rng.choices("abcdefghij", k=rng.randint(1, 12)))
                for _ in range(rng.randint(1, 400))
            ]
            seps = [rng.choice([" ", " ", " ", "\n", "\n\n", "  "]) for _ in words]
            parts.append("".join(w + s for w, s in zip(words, seps, strict=True)))
        parts.append(rng.choice(["", "\n", "\n\n", " "]))
    return "".join(parts)


@pytest.mark.parametrize("seed", range(300))
def test_split_fuzz_random_text_and_code(seed: int):
    rng = random.Random(seed)
    text = _random_text(rng)
    limit = rng.choice([2000, 2000, 2000, 500, 100])
    check(text, limit)


def test_split_fuzz_unbroken_and_backtick_runs():
    rng = random.Random(1234)
    for _ in range(50):
        n = rng.randint(1900, 10_000)
        text = "".join(rng.choices("a`", weights=[5, 1], k=n))
        check(text, 2000)
