"""Luna's Markdown as Matrix message content: sanitized HTML, edits, replies, threads, splitting.

Job: build the ``content`` dicts the Matrix client sends (``m.room.message`` with
``format: org.matrix.custom.html``, ``m.replace`` edits, ``m.thread`` and ``m.in_reply_to``
relations), and cut a long reply into parts that fit one event.

Invariants:
- The HTML is sanitized by construction: markdown-it renders with raw HTML *off*, so every
  ``<`` of the model's text is escaped, and only the tags markdown-it itself writes appear,
  all in the Matrix spec's allowed set (``<s>`` becomes ``<del>``, images become links: Matrix
  clients only show ``mxc://`` images). Links keep markdown-it's scheme check (no
  ``javascript:``).
- ``body`` always carries the plain Markdown, the fallback for clients without HTML.
- An edit carries ``m.new_content`` and a ``* ``-prefixed fallback body; the relation of the
  original (thread or reply) is never repeated inside ``m.new_content``.
- :func:`split` keeps every part at most ``limit`` UTF-8 bytes of Markdown and at most
  ``MAX_PART_BYTES`` of Markdown plus HTML, cutting at a paragraph, then a line, then a space,
  never inside a UTF-8 character. That budget keeps the largest event Luna sends, an edit
  (which carries body and HTML twice) encrypted (base64: 4/3 larger), under the 65,536-byte
  event cap: 2 × 22,000 × 4/3 = 58,667 bytes, plus relations.
"""

from __future__ import annotations

from typing import Any

from markdown_it import MarkdownIt

HTML_FORMAT = "org.matrix.custom.html"
# Room events are capped at 65,536 bytes of JSON (see the module invariants).
DEFAULT_PART_BYTES = 8_000  # Markdown per part
MAX_PART_BYTES = 22_000  # Markdown + HTML per part

_md = MarkdownIt("commonmark", {"html": False, "linkify": False, "breaks": True})
_md.enable(["table", "strikethrough"])
_md.disable(["image"])


def _render_strike_open(*_: Any) -> str:
    return "<del>"


def _render_strike_close(*_: Any) -> str:
    return "</del>"


_md.add_render_rule("s_open", _render_strike_open)
_md.add_render_rule("s_close", _render_strike_close)


def to_html(markdown: str) -> str:
    """Sanitized Matrix HTML for ``markdown`` (see the module invariants)."""
    html: str = _md.render(markdown)
    return html.strip()


def message(
    markdown: str, *, thread_root: str | None = None, reply_to: str | None = None
) -> dict[str, Any]:
    """A new ``m.text`` message; in ``thread_root``'s thread, or replying to ``reply_to``."""
    content: dict[str, Any] = {
        "msgtype": "m.text",
        "body": markdown,
        "format": HTML_FORMAT,
        "formatted_body": to_html(markdown),
    }
    if thread_root:
        # A thread message also says which event it follows, for clients without threads.
        content["m.relates_to"] = {
            "rel_type": "m.thread",
            "event_id": thread_root,
            "is_falling_back": reply_to is None,
            "m.in_reply_to": {"event_id": reply_to or thread_root},
        }
    elif reply_to:
        content["m.relates_to"] = {"m.in_reply_to": {"event_id": reply_to}}
    return content


def notice(
    text: str, *, thread_root: str | None = None, reply_to: str | None = None
) -> dict[str, Any]:
    """A one-line ``m.notice`` (status, errors, approval prompts): bots' own messages."""
    content = message(text, thread_root=thread_root, reply_to=reply_to)
    content["msgtype"] = "m.notice"
    return content


def edit(original_event_id: str, markdown: str, *, msgtype: str = "m.text") -> dict[str, Any]:
    """An ``m.replace`` edit of ``original_event_id`` to ``markdown``."""
    html = to_html(markdown)
    new = {"msgtype": msgtype, "body": markdown, "format": HTML_FORMAT, "formatted_body": html}
    return {
        "msgtype": msgtype,
        "body": f"* {markdown}",
        "format": HTML_FORMAT,
        "formatted_body": f"* {html}",
        "m.new_content": new,
        "m.relates_to": {"rel_type": "m.replace", "event_id": original_event_id},
    }


def reaction(event_id: str, key: str) -> dict[str, Any]:
    return {"m.relates_to": {"rel_type": "m.annotation", "event_id": event_id, "key": key}}


def _cut(text: str, limit: int) -> int:
    """Index to cut ``text`` at so that ``text[:i]`` is at most ``limit`` UTF-8 bytes."""
    head = text.encode()[:limit].decode(errors="ignore")
    for sep in ("\n\n", "\n", " "):
        at = head.rfind(sep)
        if at > len(head) // 2:
            return at + len(sep)
    return max(1, len(head))


def _size(markdown: str) -> int:
    return len(markdown.encode()) + len(to_html(markdown).encode())


def split(markdown: str, limit: int = DEFAULT_PART_BYTES) -> list[str]:
    """``markdown`` as parts within the budgets above (one part when it fits)."""
    parts: list[str] = []
    rest = markdown
    while rest:
        size = limit
        while True:
            at = len(rest) if len(rest.encode()) <= size else _cut(rest, size)
            if _size(rest[:at]) <= MAX_PART_BYTES or size <= 256:
                break
            size //= 2  # HTML-heavy text (escapes, markup): a smaller part
        parts.append(rest[:at].rstrip())
        rest = rest[at:].lstrip("\n")
    return parts or [""]
