"""Sub-agent tools: ``delegate`` (a self-contained subtask) and ``code_task`` (write, run, fix).

The agent supplies ``ToolContext.run_subagent(task, tool_names, workdir)``; these tools only
choose the task text, the tool set and the folder.

Invariants:
- Sub-agents cannot spawn sub-agents: with ``ctx.depth >= 1`` both tools refuse, and the tool
  sets they hand out never contain ``delegate`` or ``code_task``.
- ``code_task`` works in its own folder under ``<workspace>/code/``; the folder name is
  sanitized so it cannot leave the workspace.
"""

from __future__ import annotations

import re
from pathlib import Path

from luna.config import Config
from luna.errors import ToolError
from luna.tools.registry import SubAgentRunner, ToolContext, ToolRegistry

SPAWNING = frozenset({"delegate", "code_task"})
DELEGATE_TOOLS = ["read_file", "list_directory", "web_fetch", "web_search", "summarize_paper"]
CODE_TOOLS = ["bash", "read_file", "write_file", "list_directory"]


def _runner(ctx: ToolContext) -> SubAgentRunner:
    if ctx.depth >= 1:
        raise ToolError("sub-agents cannot start other sub-agents; do this step yourself")
    if ctx.run_subagent is None:
        raise ToolError("sub-agents are not available in this conversation")
    return ctx.run_subagent


def code_folder(cfg: Config, name: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9_-]+", "-", name).strip("-")[:60] or "task"
    return cfg.agent.workspace.resolve() / "code" / slug


def register(reg: ToolRegistry, cfg: Config) -> None:
    @reg.tool(level="allow", timeout=cfg.agent.turn_timeout)
    async def delegate(task: str, tools: list[str] | None = None, *, ctx: ToolContext) -> str:
        """Hand a self-contained subtask to a sub-agent with its own short loop; get its answer.

        Args:
            task: Everything the sub-agent needs to know: goal, inputs, expected answer.
            tools: Tool names it may use (default: reading files and the web).
        """
        run = _runner(ctx)
        names = DELEGATE_TOOLS if tools is None else tools
        unknown = [n for n in names if reg.get(n) is None]
        if unknown:
            raise ToolError(f"unknown tool(s) {', '.join(unknown)}. {reg.suggest(unknown[0])}")
        refused = [n for n in names if n in SPAWNING]
        if refused:
            raise ToolError("a sub-agent cannot be given delegate or code_task")
        answer = await run(task, [n for n in names if reg.get(n) is not None], None)
        return answer or "(the sub-agent returned no answer)"

    @reg.tool(level="ask", timeout=cfg.agent.turn_timeout)
    async def code_task(task: str, folder: str = "task", *, ctx: ToolContext) -> str:
        """Give a coding task to a sub-agent that writes, runs and fixes code in its own folder.

        Args:
            task: What to build or fix, and how to know it works.
            folder: Name of its folder under the workspace's code/ directory.
        """
        run = _runner(ctx)
        workdir = code_folder(cfg, folder)
        workdir.mkdir(parents=True, exist_ok=True)
        names = [n for n in CODE_TOOLS if reg.get(n) is not None]
        full = (
            f"{task}\n\nWork only inside the folder {workdir}; write the files there, run them "
            "with bash, fix what fails, and finish with a short report of what you made and "
            "how you checked it."
        )
        answer = await run(full, names, workdir)
        return f"[code_task folder: {workdir}]\n{answer or '(no report)'}"
