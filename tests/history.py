"""What a session's logged history looks like to the model: the one view tests assert on."""

from __future__ import annotations

from typing import Any

from luna.agent.prompt import history_messages


async def prompt_view(memory: Any, session_id: str) -> tuple[str | None, list[dict[str, Any]]]:
    """(summary, the messages after the compaction cut as the next request would carry them)."""
    summary, records = await memory.prompt_history(session_id)
    return summary, history_messages(records, reasoning="keep")
