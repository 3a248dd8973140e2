"""One streamed model call of a turn: what the model says becomes the turn's events as it comes.

Invariants:
- Text, reasoning and status lines are emitted as they arrive (``TextDelta``,
  ``ReasoningDelta``, ``Status``); prefill progress only for a prompt of at least
  ``PROGRESS_MIN_TOKENS`` uncached tokens.
- A model that is silent (no text, reasoning, progress or status) for ``WAITING_NOTICE``
  seconds, or half its ``llm.first_byte_timeout`` when that is shorter, gets one Status line
  saying Luna is waiting and how long it will: the user is never left without a word.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from luna.config import LLMConfig
from luna.llm.contract import ChatModel, Messages, RequestRecorder, ToolSpecs
from luna.llm.stream import Progress
from luna.messages import AgentEvent, LLMResponse, ReasoningDelta, Status, TextDelta

PROGRESS_MIN_TOKENS = 2000  # only a prefill this long is worth a progress line
WAITING_NOTICE = 10.0  # seconds of silence from the model before the user is told

Emit = Callable[[AgentEvent], None]


async def stream_reply(
    messages: Messages,
    *,
    llm: ChatModel,
    tools: ToolSpecs | None,
    emit: Emit,
    limits: LLMConfig,
    record: RequestRecorder | None,
    lane: str,
) -> LLMResponse:
    """The model's answer to ``messages``, its parts emitted as they come (see the module)."""
    heard = asyncio.Event()  # the model (or the client about it) said something

    async def on_text(text: str) -> None:
        heard.set()
        emit(TextDelta(text))

    async def on_reasoning(text: str) -> None:
        heard.set()
        emit(ReasoningDelta(text))

    async def on_status(text: str) -> None:
        heard.set()
        emit(Status(text))

    async def on_progress(p: Progress) -> None:
        heard.set()
        if p.total - p.cached >= PROGRESS_MIN_TOKENS:
            emit(Status(f"reading {p.total - p.cached:,} tokens… {p.share:.0%}", "progress"))

    notice = asyncio.create_task(_waiting_notice(heard, emit, limits))
    try:
        return await llm.stream(
            messages,
            tools,
            on_text=on_text,
            on_reasoning=on_reasoning,
            on_status=on_status,
            on_progress=on_progress,
            record=record,
            lane=lane,
        )
    finally:
        notice.cancel()


async def _waiting_notice(heard: asyncio.Event, emit: Emit, limits: LLMConfig) -> None:
    """One Status line when the model stays silent (see the module invariants)."""
    after = min(WAITING_NOTICE, limits.first_byte_timeout / 2)
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(after):
            await heard.wait()
    if not heard.is_set():
        emit(
            Status(
                f"waiting for the model to answer (no reply for {after:g} s; Luna gives up "
                f"after {limits.first_byte_timeout:g} s without a first byte, "
                f"{limits.timeout:g} s in all)"
            )
        )
