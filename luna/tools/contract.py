"""The tools' seams: ``ToolRunner`` (what the agent calls), and the two ports tools are given,
``ToolProvider`` (tools that come and go: MCP) and ``SchedulerPort`` (the scheduler).

``ToolRegistry`` keeps ``ToolRunner``; ``MCPManager`` is a ``ToolProvider``;
``luna.scheduler.tool_port.ToolPort`` is the ``SchedulerPort``. ``tools`` never imports the
agent, MCP or the scheduler: they meet here.

Invariants:
- ``ToolRunner.execute`` never raises except ``CancelledError``: every failure is a
  ``ToolResult`` the model reads.
- ``specs`` order is stable across calls (the prompt's head is cached by the server).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from luna.messages import ToolCall, ToolResult
    from luna.skills.library import SkillLibrary
    from luna.tools.registry import ToolContext


class ToolRunner(Protocol):
    """What the agent, its head and its sub-agents call on the tools."""

    skills: SkillLibrary | None  # the skill library, for the head's index; None: no skills

    def specs(
        self, *, names: Iterable[str] | None = None, with_catalog: bool = False
    ) -> list[dict[str, Any]]:
        """OpenAI tool specs: the direct tools (or exactly ``names``), in a stable order."""
        ...

    def guest_names(self) -> list[str]:
        """The tools offered in turns without tool rights."""
        ...

    async def settle(self) -> list[str]:
        """Wait for tools still arriving; one line per source left out."""
        ...

    async def execute(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        """Run one call: look up, validate, permit, run under a timeout, shape."""
        ...


class ToolProvider(Protocol):
    """A source of tools that come and go while Luna runs (the MCP manager)."""

    def owns(self, name: str) -> bool:
        """Whether ``name`` is in this provider's namespace, registered or not."""
        ...

    async def settle(self) -> list[str]:
        """Wait (each source within its own bound) for tools still arriving; one line per
        source that is left out, for the user and the log."""
        ...

    async def revive(self, name: str) -> str | None:
        """For an unregistered ``name`` this provider owns: bring its source back if it can.
        None when ``name`` is registered now, else the line the model reads."""
        ...


class SchedulerPort(Protocol):
    """The scheduler as the schedule tools reach it (``registry.scheduler``).

    Each call acts for the person in ``ctx`` and answers with one line for the model; a
    refusal raises ``ScheduleError`` with that line.
    """

    async def schedule(self, ctx: ToolContext, request: dict[str, Any]) -> str: ...

    async def list(self, ctx: ToolContext, *, include_finished: bool) -> str: ...

    async def cancel(self, ctx: ToolContext, task_id: int) -> str: ...
