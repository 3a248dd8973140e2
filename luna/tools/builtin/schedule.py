"""Scheduler tools: ``schedule_task``, ``list_tasks``, ``cancel_task``.

The tools call the running scheduler's API (``reg.services["scheduler"]``, a
:class:`luna.scheduler.api.Schedules`, bound by ``app``); they only turn the turn's context
into a :class:`~luna.scheduler.model.Requester`.

Invariants:
- What a tool schedules is filed under the person talking (``ctx.user_id``) and delivered
  where they talk (``ctx.frontend`` and ``ctx.address``: the same DM, thread or channel).
- Every refusal (a bad time, a cap, no right) comes back to the model as one readable line.
- With ``scheduler.strangers = "reminders"`` the tools are guest tools: offered to people
  without tool rights, where the API allows them plain reminders only.
"""

from __future__ import annotations

from typing import Literal

from luna.config import Config
from luna.errors import ScheduleError, ToolError
from luna.scheduler.api import Schedules, task_line
from luna.scheduler.model import Requester, Target, TaskRequest
from luna.tools.registry import ToolContext, ToolRegistry

ADDRESSED = ("repl", "discord", "web")


def requester(ctx: ToolContext) -> Requester:
    target = None
    if ctx.frontend in ADDRESSED and (ctx.frontend != "discord" or ctx.address):
        target = Target(ctx.frontend, dict(ctx.address or {}))
    return Requester(ctx.user_id, ctx.scope, ctx.frontend, ctx.session_id, target)


def register(reg: ToolRegistry, cfg: Config) -> None:
    if not cfg.scheduler.enabled:
        return
    guest = cfg.scheduler.strangers == "reminders"

    def api() -> Schedules:
        found = reg.services.get("scheduler")
        if found is None:
            raise ToolError("the scheduler is not running here; tasks cannot be set now")
        return found

    @reg.tool(level="allow", guest=guest)
    async def schedule_task(
        text: str,
        kind: Literal["reminder", "prompt"] = "reminder",
        at: str | None = None,
        after: str | None = None,
        cron: str | None = None,
        every: str | None = None,
        *,
        ctx: ToolContext,
    ) -> str:
        """Schedule a reminder, or a prompt you will run then, delivered in this conversation.

        Give exactly one of at, after, cron or every. Times are the user's local time (the
        one in the context block).

        Args:
            text: For a reminder, the message to deliver as it is; for a prompt, the
                instruction to carry out then (you will have your tools).
            kind: "reminder" delivers text unchanged; "prompt" runs it as a turn at that time.
            at: A one-off local time, "YYYY-MM-DD HH:MM".
            after: A one-off delay from now: "20m", "2h", "1h30m", "3d".
            cron: A recurring cron expression, five fields, e.g. "0 8 * * 1-5".
            every: A recurring interval: "30m", "6h", "1d", "1w".
        """
        request = TaskRequest(text, kind, at=at, after=after, cron=cron, every=every)
        try:
            task = await api().add(request, requester(ctx))
        except ScheduleError as e:
            raise ToolError(str(e)) from None
        return f"Scheduled {task_line(task)}"

    @reg.tool(level="allow", guest=guest)
    async def list_tasks(include_finished: bool = False, *, ctx: ToolContext) -> str:
        """List the scheduled reminders and tasks, next due first.

        Args:
            include_finished: Also show done, missed, failed and cancelled ones.
        """
        tasks = await api().list(requester(ctx), include_finished=include_finished, limit=50)
        if not tasks:
            return "No scheduled tasks."
        return "\n".join(task_line(t) for t in tasks)

    @reg.tool(level="allow", guest=guest)
    async def cancel_task(task_id: int, *, ctx: ToolContext) -> str:
        """Cancel a scheduled reminder or task.

        Args:
            task_id: The task's number, as list_tasks shows it (#3 is 3).
        """
        try:
            task = await api().cancel(task_id, requester(ctx))
        except ScheduleError as e:
            raise ToolError(str(e)) from None
        return f"Cancelled {task_line(task)}"
