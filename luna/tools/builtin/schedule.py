"""Scheduler tools: ``schedule_task``, ``list_tasks``, ``cancel_task``.

The tools only declare what the model may say; the work is the running scheduler's, reached
through ``reg.scheduler`` (a ``SchedulerPort``: ``luna.scheduler.tool_port.ToolPort``, bound
when the scheduler starts), so this lower layer never imports the scheduler.

Invariants:
- What a tool schedules is filed under the person talking and delivered where they talk (the
  port reads ``ctx.user_id``, ``ctx.frontend`` and ``ctx.address``).
- Every refusal (a bad time, a cap, no right) comes back to the model as one readable line.
- With ``scheduler.strangers = "reminders"`` the tools are guest tools: offered to people
  without tool rights, where the scheduler allows them plain reminders only.
"""

from __future__ import annotations

from typing import Literal

from luna.config import Config
from luna.errors import ScheduleError, ToolError
from luna.tools.contract import SchedulerPort
from luna.tools.registry import ToolContext, ToolRegistry


def register(reg: ToolRegistry, cfg: Config) -> None:
    if not cfg.scheduler.enabled:
        return
    guest = cfg.scheduler.strangers == "reminders"

    def port() -> SchedulerPort:
        found = reg.scheduler
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
        request = {"text": text, "kind": kind, "at": at, "after": after, "cron": cron,
                   "every": every}  # fmt: skip
        try:
            return await port().schedule(ctx, request)
        except ScheduleError as e:
            raise ToolError(str(e)) from None

    @reg.tool(level="allow", guest=guest)
    async def list_tasks(include_finished: bool = False, *, ctx: ToolContext) -> str:
        """List the scheduled reminders and tasks, next due first.

        Args:
            include_finished: Also show done, missed, failed and cancelled ones.
        """
        return await port().list(ctx, include_finished=include_finished)

    @reg.tool(level="allow", guest=guest)
    async def cancel_task(task_id: int, *, ctx: ToolContext) -> str:
        """Cancel a scheduled reminder or task.

        Args:
            task_id: The task's number, as list_tasks shows it (#3 is 3).
        """
        try:
            return await port().cancel(ctx, task_id)
        except ScheduleError as e:
            raise ToolError(str(e)) from None
