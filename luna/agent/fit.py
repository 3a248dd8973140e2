"""Fit a request into the model's context: before sending, and when the server says it does not.

Invariants:
- A request is checked against the smaller of ``llm.context_tokens`` and the server's own
  per-slot context (llama-server's ``/props``), keeping room for the reply. The token count is
  estimated from the characters, at the chars-per-token ratio the server's last usage showed;
  an image counts as ``IMAGE_CHARS`` characters, never as its base64.
- Shrinking never touches the session log: it changes only what this request carries. Oversized
  tool results become their saved-file reference first; then whole old turns go, oldest first
  (a turn at a time, so no tool call loses its result); the newest user message always stays.
- A request that cannot be made to fit is refused with one line that says what to do.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from luna.agent.prompt import turn_start
from luna.llm.vision import for_sizing
from luna.messages import Usage

DEFAULT_CHARS_PER_TOKEN = 3.0  # JSON and code tokenize densely: guess low, so we trim early
REPLY_SHARE = 0.25  # at most this share of the context is kept free for the reply
BIG_RESULT_CHARS = 2000
HEAD_CHARS = 800
LEFT_OUT_NOTE = (
    "[Luna: older messages of this conversation were left out of this request so it fits the "
    "model's context; they are still in memory and will be summarized.]"
)
_SAVED_FOOTER = re.compile(r"\n\[large output of [^\n]*saved to [^\n]*\]\s*(?:</untrusted>)?\s*$")


def request_chars(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
    sized = for_sizing(messages)
    return len(json.dumps(sized, ensure_ascii=False)) + len(json.dumps(tools or []))


@dataclass
class Trimmed:
    """What shrinking did to one request (for the log)."""

    messages: list[dict[str, Any]]
    dropped_messages: int
    shrunk_results: int


class ContextFit:
    """The context budget of one model endpoint and the chars-per-token ratio it shows."""

    def __init__(self, context_tokens: int, max_tokens: int) -> None:
        self.context_tokens = context_tokens
        self.max_tokens = max_tokens
        self.chars_per_token = DEFAULT_CHARS_PER_TOKEN

    def learn(self, chars: int, usage: Usage | None) -> None:
        """Calibrate the estimate on a request of ``chars`` characters (:func:`request_chars`,
        measured once per request) that the server counted."""
        if usage is not None and usage.prompt_tokens > 0:
            self.chars_per_token = max(1.0, chars / usage.prompt_tokens)

    def tokens(self, chars: int) -> int:
        """The estimated tokens of a request of ``chars`` characters."""
        return int(chars / self.chars_per_token) + 1

    def estimate(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> int:
        return self.tokens(request_chars(messages, tools))

    def limit(self, server_n_ctx: int | None) -> int:
        """Prompt tokens a request may use."""
        n_ctx = min(self.context_tokens, server_n_ctx or self.context_tokens)
        return n_ctx - min(self.max_tokens, int(n_ctx * REPLY_SHARE))

    def shrink(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        target: int,
    ) -> Trimmed | None:
        """The request made to fit ``target`` tokens, or None when even that cannot.

        Linear in the request: each message is measured once, old turns are dropped by a
        running sum (a 10,000-message history is trimmed in one pass, not one pass per turn).
        """
        out = [dict(m) for m in messages]
        shrunk = sum(_shrink_result(m) for m in out if m.get("role") == "tool")
        budget = int(target * self.chars_per_token) - len(json.dumps(tools or [])) - 2
        sizes = [_chars(m) for m in out]
        first = 1 if out and out[0].get("role") == "system" else 0
        newest = turn_start(out)
        total = sum(sizes)
        cut = first  # messages [first, cut) are left out: whole turns, oldest first
        if total > budget:
            budget -= len(json.dumps(f"\n\n{LEFT_OUT_NOTE}", ensure_ascii=False)) - 2  # said below
            starts = [i for i in range(first + 1, newest + 1) if out[i].get("role") == "user"]
            for start in starts:
                total -= sum(sizes[cut:start])
                cut = start
                if total <= budget:
                    break
        dropped = cut - first
        if dropped:
            del out[first:cut]
            out[0] = {**out[0], "content": f"{out[0]['content']}\n\n{LEFT_OUT_NOTE}"}
        if self.estimate(out, tools) > target:
            for m in out[turn_start(out) :]:
                if m.get("role") == "tool":
                    shrunk += _shrink_result(m, head=HEAD_CHARS // 2)
        if self.estimate(out, tools) > target:
            return None
        return Trimmed(out, dropped, shrunk)


def _chars(message: dict[str, Any]) -> int:
    return len(json.dumps(for_sizing([message])[0], ensure_ascii=False)) + 2  # ", " between


def _shrink_result(message: dict[str, Any], head: int = HEAD_CHARS) -> int:
    """Cut one oversized tool result in place to its saved-file reference or its head."""
    content = message.get("content") or ""
    if not isinstance(content, str):  # text and images: small text, images sized as tokens
        return 0
    if len(content) <= BIG_RESULT_CHARS and head == HEAD_CHARS:
        return 0
    if len(content) <= head * 2:
        return 0
    footer = _SAVED_FOOTER.search(content)
    if footer is not None:
        message["content"] = "[output left out to fit the context]" + footer.group(0)
    else:
        message["content"] = (
            f"{content[:head]}\n[… {len(content) - head} characters left out to fit the context …]"
        )
    return 1
