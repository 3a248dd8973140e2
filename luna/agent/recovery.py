"""One model call that survives what the server says about the request, not only the network.

Invariants:
- A request that would not fit the context is shrunk before it is sent (``fit``); one that the
  server still finds too long (HTTP 400 ``exceed_context_size_error``) is shrunk to the
  server's own count and sent again, once.
- A request the server refuses as it is (``LLMRejectedError``) is searched for the message that
  makes it fail: the prompt is rendered in prefixes with llama-server's ``/apply-template``
  (no generation) and the first failing turn segment is left out of this request, once. The
  log says which message and why (``history_repaired``); the digest of the message is
  remembered so later turns of the session leave it out at once.
- The newest user message is never left out: a request that fails because of it fails the turn
  with one line.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from luna.agent.fit import ContextFit, request_chars
from luna.agent.prompt import turn_start
from luna.errors import LLMContextOverflowError, LLMRejectedError
from luna.llm.contract import ChatModel
from luna.messages import LLMResponse
from luna.observe import log_event

log = logging.getLogger(__name__)

SERVER_MARGIN = 0.9  # after the server said "too long", aim a little lower than its limit
TOO_LONG = (
    "This conversation no longer fits the model's context, even with older messages left out "
    "— the newest message alone is too long. Send it in smaller parts, or start a /new session."
)
TURN_TOO_LONG = (
    "This turn's tool calls and results no longer fit the model's context, even with older "
    "messages left out and big results cut. Ask for less at a time (fewer files, smaller "
    "outputs), or start a /new session."
)


def digest(message: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(message, sort_keys=True).encode()).hexdigest()[:16]


def _cut_points(messages: list[dict[str, Any]]) -> list[int]:
    """Prefix lengths that end a complete segment (after a user message or a tool result)."""
    points, seen_user = [], False
    for i, m in enumerate(messages):
        seen_user = seen_user or m.get("role") == "user"
        if seen_user and m.get("role") in ("user", "tool"):
            points.append(i + 1)
    return points


async def find_rejected(
    llm: ChatModel, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
) -> tuple[int, int] | None:
    """(start, end) of the first segment whose prefix the server refuses to render, or None."""
    if await llm.server_info() is None:
        return None  # only llama-server can render without generating

    async def fails(k: int) -> bool:
        try:
            await llm.render(messages[:k], tools)
        except LLMRejectedError:
            return True
        return False

    points = _cut_points(messages)
    if not points or not await fails(points[-1]):
        return None
    lo, hi = 0, len(points) - 1  # find the first failing cut point
    while lo < hi:
        mid = (lo + hi) // 2
        if await fails(points[mid]):
            hi = mid
        else:
            lo = mid + 1
    start = points[lo - 1] if lo > 0 else 1
    return start, points[lo]


class ModelCall:
    """Calls the model for one turn, fitting and repairing the request as described above."""

    def __init__(
        self, llm: ChatModel, fit: ContextFit, excluded: set[str], lane: str | None = None
    ) -> None:
        self.llm = llm
        self.lane = lane  # the session: its server's context counts
        self.fit = fit
        self.excluded = excluded  # digests of messages this session's server refused
        self.overflowed = False  # a request of this turn had to be trimmed to fit
        self.context_tokens: int | None = None  # the server's own context, once known

    def leave_out_refused(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not self.excluded:
            return messages
        return [m for m in messages if digest(m) not in self.excluded]

    async def __call__(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        send: Callable[[list[dict[str, Any]]], Awaitable[LLMResponse]],
    ) -> tuple[LLMResponse, list[dict[str, Any]]]:
        """(response, the messages actually sent); later rounds build on the latter."""
        info = await self.llm.server_info(lane=self.lane)
        self.context_tokens = info.n_ctx if info else None
        limit = self.fit.limit(self.context_tokens)
        messages, chars = self._fitted(messages, tools, limit, reason="estimate")
        try:
            response = await send(messages)
        except LLMContextOverflowError as e:
            if e.n_prompt_tokens:  # the server counted: calibrate on its figure
                self.fit.chars_per_token = max(1.0, chars / e.n_prompt_tokens)
            target = int(self.fit.limit(e.n_ctx or limit) * SERVER_MARGIN)
            messages, chars = self._fitted(messages, tools, target, reason="server")
            response = await send(messages)
        except LLMRejectedError as e:
            messages = await self._repaired(messages, tools, e)
            chars = request_chars(messages, tools)
            response = await send(messages)
        self.fit.learn(chars, response.usage)
        return response, messages

    def _fitted(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        limit: int,
        *,
        reason: str,
    ) -> tuple[list[dict[str, Any]], int]:
        """The messages to send within ``limit`` tokens, and their :func:`request_chars` (each
        request is measured once: the estimate here, the calibration after it)."""
        chars = request_chars(messages, tools)
        if reason == "estimate" and self.fit.tokens(chars) <= limit:
            return messages, chars
        trimmed = self.fit.shrink(messages, tools, limit)
        self.overflowed = True
        if trimmed is None:
            tools_ran = len(messages) - turn_start(messages) > 1  # more than the user message
            text = TURN_TOO_LONG if tools_ran else TOO_LONG
            raise LLMContextOverflowError(text, n_prompt_tokens=None, n_ctx=limit)
        log_event(
            "context_trimmed",
            reason=reason,
            limit_tokens=limit,
            dropped_messages=trimmed.dropped_messages,
            shrunk_results=trimmed.shrunk_results,
        )
        log.warning(
            "request trimmed to fit the context (%s): %d old messages left out, %d results cut",
            reason,
            trimmed.dropped_messages,
            trimmed.shrunk_results,
        )
        return trimmed.messages, request_chars(trimmed.messages, tools)

    async def _repaired(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        error: LLMRejectedError,
    ) -> list[dict[str, Any]]:
        found = await find_rejected(self.llm, messages, tools)
        newest = turn_start(messages)
        if found is None or found[0] <= newest < found[1]:
            raise error  # nothing to leave out, or it is the newest user message itself
        start, end = found
        segment = messages[start:end]
        for m in segment:
            self.excluded.add(digest(m))
        log_event(
            "history_repaired",
            action="left_out",
            roles=[m.get("role") for m in segment],
            position=start,
            error=str(error)[:300],
        )
        log.warning(
            "the LLM server refused message %d of this session's history (%s); left out",
            start,
            error,
        )
        return messages[:start] + messages[end:]
