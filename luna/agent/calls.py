"""One round of tool calls: vet what the model asked for, run it, and record the results.

Invariants:
- A call is run only when it is whole: its arguments parse as a JSON object, and it is not the
  last call of a reply cut off by ``max_tokens`` (a cut-off ``rm -rf /home/me/old`` must never
  run as ``rm -rf /home``). A refused call gets an error result the model can act on, quoting
  what it actually sent, and the round goes on.
- What is logged and replayed is always valid: a refused call's arguments are stored as ``{}``
  (servers reject history whose arguments do not parse); the raw text lives in its result.
- Each call is logged before it runs and each result as it arrives (``persist``), so an
  interrupted round still shows what ran.
- At most ``agent.max_calls_per_reply`` calls of one reply run; the rest are neither run nor
  kept in the assistant message (200 results would fill the context), and the last result
  says how many were left and why, so the model can ask again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from luna.agent.prompt import tool_result
from luna.llm.wire import valid_arguments
from luna.messages import (
    AgentEvent,
    Attachment,
    LLMResponse,
    ToolCall,
    ToolFinished,
    ToolMedia,
    ToolResult,
    ToolStarted,
)
from luna.observe import log_event

RAW_EXCERPT = 300
Persist = Callable[[dict[str, Any]], Awaitable[None]]
Keep = Callable[[ToolMedia, str], Awaitable[Attachment | None]]  # stores a tool's image


@dataclass(frozen=True)
class VettedCall:
    """A call as it will be logged (valid arguments) and why it must not run, if so."""

    call: ToolCall
    raw_arguments: str
    problem: str | None = None


@dataclass(frozen=True)
class Round:
    """The calls of one reply that will run, and how many beyond the cap were left out."""

    calls: list[VettedCall]
    dropped: int = 0
    limit: int = 0


def vet_calls(response: LLMResponse, limit: int) -> Round:
    """The response's first ``limit`` calls, each with valid arguments and a problem when it
    must not run."""
    out = []
    last = len(response.tool_calls) - 1
    for i, call in enumerate(response.tool_calls[:limit]):
        arguments, problem = valid_arguments(call.arguments)
        if response.is_truncated and i == last:
            problem = "the reply hit its length limit (llm.max_tokens) during this call"
        out.append(
            VettedCall(ToolCall(call.id, call.name, arguments), call.arguments or "", problem)
        )
    dropped = max(0, len(response.tool_calls) - limit)
    if dropped:
        log_event("tool_calls_capped", ran=limit, dropped=dropped)
    return Round(out, dropped, limit)


def dropped_note(round_: Round) -> str:
    return (
        f"\n[Luna: that reply asked for {round_.limit + round_.dropped} tool calls; only the "
        f"first {round_.limit} ran (agent.max_calls_per_reply). Ask for the rest in your next "
        "step if they are still needed.]"
    )


def refusal_text(vetted: VettedCall) -> str:
    raw = vetted.raw_arguments
    shown = raw if len(raw) <= RAW_EXCERPT else raw[:RAW_EXCERPT] + "…"
    return (
        f"Error: {vetted.call.name} was not run: {vetted.problem}. The arguments received "
        f"were: {shown!r}. Send the call again, complete, with a JSON object of arguments."
    )


async def run_round(
    round_: Round,
    execute: Callable[[ToolCall], Awaitable[Any]],
    emit: Callable[[AgentEvent], None],
    persist: Persist | None,
    *,
    keep: Keep | None = None,
) -> list[dict[str, Any]]:
    """Run the runnable calls in order; returns the tool-result messages as logged (a
    result's images, stored through ``keep``, as its ``attachments``)."""
    results = []
    loop = asyncio.get_running_loop()
    for n, item in enumerate(round_.calls, 1):
        call = item.call
        emit(ToolStarted(call.id, call.name, item.raw_arguments or call.arguments))
        started = loop.time()
        kept: list[Attachment] = []
        if item.problem is not None:
            log_event("tool_call_refused", tool=call.name, reason=item.problem)
            content, is_error = refusal_text(item), True
        else:
            result = await execute(call)
            content, is_error = result.content, result.is_error
            media = result.media if isinstance(result, ToolResult) else ()
            images = [m for m in media if m.kind == "image"]
            for i, image in enumerate(images, 1):
                name = f"{call.name}-{i}.{image.mime.rpartition('/')[2] or 'img'}"
                stored = await keep(image, name) if keep is not None else None
                if stored is not None:
                    kept.append(stored)
                else:
                    content += f"\n[{name} ({image.mime}) could not be shown]"
        emit(ToolFinished(call.id, call.name, is_error, loop.time() - started, content[:200]))
        if round_.dropped and n == len(round_.calls):
            content += dropped_note(round_)
        message = tool_result(call.id, content, kept)
        if persist is not None:
            await persist(message)
        results.append(message)
    return results
