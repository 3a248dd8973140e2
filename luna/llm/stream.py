"""Assemble a streamed chat completion from its chunks, and read usage and timings.

Job: :class:`StreamAccumulator` takes each ``ChatCompletionChunk`` as it arrives and tells the
caller what to show (visible text, reasoning text, prompt progress); at the end it holds the
whole reply: content, reasoning, tool calls by index, finish reason, usage and timings.

Invariants:
- Content deltas pass through :class:`~luna.llm.markup.StreamFilter`, so leaked markup never
  reaches the caller's text callback.
- Tool-call deltas are joined by their ``index``; a call without a name is dropped.
- llama-server's ``timings`` (``cache_n``, ``prompt_n``, ``prompt_ms``) and its
  ``prompt_progress`` chunks are read when present and ignored when not (other servers).
- Pure: no I/O, no awaits.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from luna.llm.markup import StreamFilter
from luna.messages import ToolCall, Usage, new_call_id


@dataclass(frozen=True)
class Progress:
    """Prompt processing progress from llama-server (``return_progress``)."""

    total: int
    cached: int
    processed: int

    @property
    def share(self) -> float:
        """How much of the prompt still to prefill is done (0..1)."""
        todo = self.total - self.cached
        return 1.0 if todo <= 0 else max(0.0, min(1.0, (self.processed - self.cached) / todo))


@dataclass
class Shown:
    """What one chunk adds for the user: visible text, reasoning text, progress."""

    text: str = ""
    reasoning: str = ""
    progress: Progress | None = None


def reasoning_of(obj: Any) -> str:
    """reasoning_content (llama.cpp, DeepSeek) or reasoning (vLLM, OpenRouter)."""
    if obj is None:
        return ""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(obj, name, None)
        if isinstance(value, str) and value:
            return value
    return ""


def _count(value: Any) -> int:
    """A token count the server sent: a non-negative int, anything else counts as 0."""
    is_int = isinstance(value, int) and not isinstance(value, bool)
    return value if is_int and value > 0 else 0


def usage_of(raw: Any, timings: Any) -> Usage | None:
    """Usage from the OpenAI ``usage`` object plus llama-server's ``timings``, if any (figures
    that are not counts, as a broken server may send, count as 0)."""
    cached = prefilled = 0
    prompt_ms = 0.0
    if isinstance(timings, dict):
        cached = _count(timings.get("cache_n"))
        prefilled = _count(timings.get("prompt_n"))
        ms = timings.get("prompt_ms")
        prompt_ms = float(ms) if isinstance(ms, int | float) else 0.0
    if raw is None:
        if not (cached or prefilled):
            return None
        return Usage(cached_tokens=cached, prefilled_tokens=prefilled, prompt_ms=prompt_ms)
    details = getattr(raw, "prompt_tokens_details", None)
    if details is not None and not cached:
        cached = _count(getattr(details, "cached_tokens", None))
    prompt = _count(getattr(raw, "prompt_tokens", None))
    completion = _count(getattr(raw, "completion_tokens", None))
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=_count(getattr(raw, "total_tokens", None)) or prompt + completion,
        cached_tokens=cached,
        prefilled_tokens=prefilled or max(0, prompt - cached),
        prompt_ms=prompt_ms,
    )


def _progress(chunk: Any) -> Progress | None:
    raw = getattr(chunk, "prompt_progress", None)
    if not isinstance(raw, dict):
        return None
    try:
        return Progress(int(raw["total"]), int(raw["cache"]), int(raw["processed"]))
    except (KeyError, TypeError, ValueError):
        return None


@dataclass
class StreamAccumulator:
    """The state of one streamed reply; feed it chunks, then read the result."""

    model: str
    content: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, str]] = field(default_factory=dict)
    finish_reason: str | None = None
    raw_usage: Any = None
    timings: Any = None
    filter: StreamFilter = field(default_factory=StreamFilter)
    has_output: bool = False

    def feed(self, chunk: Any) -> Shown:
        shown = Shown(progress=_progress(chunk))
        self.model = chunk.model or self.model
        self.raw_usage = chunk.usage or self.raw_usage
        self.timings = getattr(chunk, "timings", None) or self.timings
        for choice in chunk.choices or []:
            self.finish_reason = choice.finish_reason or self.finish_reason
            if choice.delta is not None:
                self._delta(choice.delta, shown)
        return shown

    def _delta(self, delta: Any, shown: Shown) -> None:
        think = reasoning_of(delta)
        if think:
            self.reasoning.append(think)
            shown.reasoning += think
            self.has_output = True
        if delta.content:
            self.content.append(delta.content)
            visible, hidden = self.filter.feed(delta.content)
            shown.text += visible
            shown.reasoning += hidden
            self.has_output = True
        for tc in delta.tool_calls or []:
            slot = self.calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
            slot["id"] = tc.id or slot["id"]
            if tc.function is not None:
                slot["name"] += tc.function.name or ""
                slot["arguments"] += tc.function.arguments or ""
            self.has_output = True

    def flush(self) -> Shown:
        """Release text the markup filter held back at the end of the stream."""
        visible, hidden = self.filter.flush()
        return Shown(text=visible, reasoning=hidden)

    def tool_calls(self) -> list[ToolCall]:
        return [
            ToolCall(id=s["id"] or new_call_id(), name=s["name"], arguments=s["arguments"])
            for _, s in sorted(self.calls.items())
            if s["name"]
        ]

    def usage(self) -> Usage | None:
        return usage_of(self.raw_usage, self.timings)
