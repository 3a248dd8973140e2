"""What each model request of a turn was, exactly, for ``luna doctor cache`` and ``luna replay``.

Invariant: recording runs in a worker thread and never fails a turn (``RequestLog.record``
swallows its own errors).
"""

from __future__ import annotations

import asyncio
from typing import Any

from luna import observe
from luna.errors import LLMError
from luna.llm.contract import RequestRecorder
from luna.memory.storage.request_log import RequestLog
from luna.messages import LLMResponse


def request_recorder(requests: RequestLog | None, session_id: str) -> RequestRecorder | None:
    """A recorder of one session's requests into ``requests`` (None: nothing to record)."""
    if requests is None:
        return None
    turn_id = observe.turn_id_var.get()

    async def record(
        body: dict[str, Any], response: LLMResponse | None, error: LLMError | None
    ) -> None:
        reply = None
        if response is not None:
            reply = {
                "content": response.content,
                "reasoning_content": response.reasoning,
                "tool_calls": [c.to_wire() for c in response.tool_calls],
                "finish_reason": response.finish_reason,
            }
        usage = response.usage if response is not None else None
        err = str(error) if error is not None else None
        await asyncio.to_thread(requests.record, session_id, turn_id, body, reply, usage, err)

    return record
