"""Running one scheduled prompt: an agent turn in the task's own session, unattended.

Invariants:
- A task's turns run in their own session (``task-<id>``, the heartbeat in ``heartbeat``),
  never in the session it was asked from, so that session's prompt prefix (the server's KV
  cache) is never broken; the result reaches the asking session as a delivery note.
- The turn runs with the rights of the person who scheduled it, decided now, not when it was
  scheduled: a stranger's prompt is refused; tool levels are those of the front-end the task
  delivers to. Nobody can approve an unattended turn: ``ask`` tools are denied (no approver),
  and every denied call is listed in the result.
- A heartbeat whose answer is empty or "nothing to report" is silent.
"""

from __future__ import annotations

import asyncio
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from luna.config import Config
from luna.messages import Frontend, InboundMessage, ToolStarted, TurnDone, TurnFailed
from luna.scheduler import rights
from luna.scheduler.model import OWNER, Task
from luna.scheduler.timing import describe
from luna.tools.registry import ToolRegistry

if TYPE_CHECKING:  # the agent runs the turn; only its type here
    from luna.agent import Agent

log = logging.getLogger(__name__)

# The front-ends with tool levels of their own, by name (a task's target is stored as text).
PERMISSION_FRONTENDS: dict[str, Frontend] = {
    "repl": "repl",
    "discord": "discord",
    "telegram": "telegram",
    "web": "web",
}
HEARTBEAT_FILE_CHARS = 20_000
SILENT = {"", "nothing to report", "heartbeat ok", "heartbeat_ok"}
_NOT_WORDS = re.compile(r"[^\w ]+")


@dataclass(frozen=True)
class RunOutcome:
    reply: str = ""
    error: str | None = None  # the turn failed (retried with backoff)
    refused: str | None = None  # it may not run at all (not retried)
    denied: tuple[str, ...] = ()  # 'ask' tools the turn wanted but could not run


def session_of(task: Task) -> str:
    return "heartbeat" if task.kind == "heartbeat" else f"task-{task.id}"


def is_silent(reply: str) -> bool:
    """An empty or "nothing to report" answer (any case, punctuation, markup)."""
    words = " ".join(_NOT_WORDS.sub(" ", reply.replace("_", " ")).lower().split())
    return words in SILENT or words.replace(" ", "_") in SILENT


def reminder_text(task: Task) -> str:
    return f"⏰ Reminder: {task.text}"


def result_text(task: Task, outcome: RunOutcome) -> str:
    head = "💓 Heartbeat" if task.kind == "heartbeat" else f"🗓️ Task #{task.id}: {task.label}"
    body = outcome.reply.strip() or "(no answer)"
    return f"{head}\n{body}{denied_note(outcome.denied, 'scheduled run')}"


def denied_note(denied: tuple[str, ...], run: str) -> str:
    """The line after an unattended run's result naming the tools it could not run (``run``:
    what kind of run, singular: "scheduled run")."""
    if not denied:
        return ""
    return (
        f"\n(Not run: {', '.join(denied)}: needs approval, and nobody can approve a {run}. "
        f"Allow it in tools.permissions to let {run}s use it.)"
    )


def asked_tools(registry: ToolRegistry, names: list[str], frontend: str) -> tuple[str, ...]:
    """The tools among ``names`` at level ``ask`` on ``frontend``: in a run nobody can
    approve, each of them was denied."""
    out = []
    for name in dict.fromkeys(names):
        info = registry.get(name)
        if info is not None and registry.level_for(info, frontend) == "ask":
            out.append(name)
    return tuple(out)


class TurnExecutor:
    """Runs a task's prompt through the agent and reports what happened."""

    def __init__(self, cfg: Config, agent: Agent, registry: ToolRegistry) -> None:
        self.cfg = cfg
        self.agent = agent
        self.registry = registry

    def frontend_of(self, task: Task) -> Frontend:
        return PERMISSION_FRONTENDS.get(task.target.frontend, "repl")

    async def prompt_text(self, task: Task) -> str:
        if task.kind == "heartbeat":
            text = task.text
            checklist = await asyncio.to_thread(_read_checklist, self.cfg.scheduler.heartbeat_file)
            if checklist:
                text += f"\n\nCheck-list ({self.cfg.scheduler.heartbeat_file.name}):\n{checklist}"
            return text
        return (
            f"[Scheduled task #{task.id}, {describe(task.schedule)}. Nobody is watching this "
            "run: do the work and report the result; tools that need approval are denied.]\n\n"
            f"{task.text}"
        )

    async def run(self, task: Task) -> RunOutcome:
        role = rights.role_of(self.cfg, task.creator)
        refusal = rights.may_schedule(self.cfg, role, "prompt")
        if refusal:
            return RunOutcome(refused=refusal)
        frontend = self.frontend_of(task)
        msg = InboundMessage(
            session_id=session_of(task),
            text=await self.prompt_text(task),
            frontend=frontend,
            user_id=task.creator if task.creator != OWNER else "owner",
            scope=task.scope,
            allow_tools=True,
            approver=None,
            address=task.target.address or None,
        )
        reply, error, wanted = "", None, []
        async for event in self.agent.run_turn(msg):
            if isinstance(event, ToolStarted):
                wanted.append(event.name)
            elif isinstance(event, TurnDone):
                reply = event.reply
            elif isinstance(event, TurnFailed):
                error = event.message
        if error is None and not reply.strip() and task.kind != "heartbeat":
            reply = "(the run produced no answer)"
        return RunOutcome(reply=reply, error=error, denied=self._denied(wanted, frontend))

    def _denied(self, names: list[str], frontend: str) -> tuple[str, ...]:
        return asked_tools(self.registry, names, frontend)


def _read_checklist(path: Path) -> str:
    try:
        with path.open(encoding="utf-8", errors="replace") as f:
            return f.read(HEARTBEAT_FILE_CHARS).strip()
    except OSError:
        return ""
