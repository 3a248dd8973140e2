"""What the model's scheduler tools call: the turn's context in, one readable line out.

Job: the tools (``luna.tools.builtin.schedule``) sit below the scheduler and never import it;
they call the :class:`ToolPort` bound as ``registry.scheduler``. It turns a
``ToolContext`` into a :class:`~luna.scheduler.model.Requester` and answers in text.

Invariants:
- What a tool schedules is filed under the person talking (``ctx.user_id``) and delivered
  where they talk (``ctx.frontend`` and ``ctx.address``: the same DM, thread or channel).
- Refusals raise ScheduleError (one line); the tool turns it into a result the model reads.
"""

from __future__ import annotations

from typing import Any

from luna.scheduler.api import Schedules, task_line
from luna.scheduler.model import Requester, Target, TaskRequest
from luna.tools.registry import ToolContext

ADDRESSED = ("repl", "discord", "telegram", "web")


def requester_of(ctx: ToolContext) -> Requester:
    """The person behind a tool call."""
    target = None
    if ctx.frontend in ADDRESSED and (ctx.frontend in ("repl", "web") or ctx.address):
        target = Target(ctx.frontend, dict(ctx.address or {}))
    return Requester(ctx.user_id, ctx.scope, ctx.frontend, ctx.session_id, target)


class ToolPort:
    """The scheduler API as the three tools need it."""

    def __init__(self, api: Schedules) -> None:
        self.api = api

    async def schedule(self, ctx: ToolContext, request: dict[str, Any]) -> str:
        task = await self.api.add(TaskRequest(**request), requester_of(ctx))
        return f"Scheduled {task_line(task)}"

    async def list(self, ctx: ToolContext, *, include_finished: bool) -> str:
        tasks = await self.api.list(requester_of(ctx), include_finished=include_finished, limit=50)
        return "\n".join(task_line(t) for t in tasks) if tasks else "No scheduled tasks."

    async def cancel(self, ctx: ToolContext, task_id: int) -> str:
        task = await self.api.cancel(task_id, requester_of(ctx))
        return f"Cancelled {task_line(task)}"
