"""Catalog tools: ``list_available_tools`` and ``use_tool`` for large MCP tool sets.

Tools registered with ``expose="catalog"`` are not sent to the model as specs (that would cost
thousands of prompt tokens); the model discovers them with ``list_available_tools`` and calls
them through ``use_tool``. So are tools that arrived after the session's head was fixed (an
MCP server that came up later): they are not declared in it until its next compaction.

Invariants:
- ``use_tool`` goes through the same validation and permission check as a direct call; its
  output is shaped and wrapped once, by the outer ``execute``.
- Neither tool can reach a name that is not registered; unknown names get close matches.
"""

from __future__ import annotations

import json
from typing import Any

from luna.config import Config
from luna.errors import ToolError, did_you_mean
from luna.messages import ToolResult
from luna.tools.registry import ToolContext, ToolInfo, ToolRegistry

MAX_LISTED = 50


def register(reg: ToolRegistry, cfg: Config) -> None:  # uniform signature
    @reg.tool(level="allow")
    async def list_available_tools(query: str = "", *, ctx: ToolContext) -> str:
        """List extra tools (from MCP servers) that can be called with use_tool.

        Args:
            query: Words to filter by name or description (empty lists everything).
        """
        words = [w.lower() for w in query.split()]
        rows = []
        for info in _extra_tools(reg, ctx):
            hay = f"{info.name} {info.description}".lower()
            if all(w in hay for w in words):
                props = info.parameters.get("properties", {})
                args = ", ".join(props) or "no arguments"
                desc = (info.description or "").strip().splitlines()
                rows.append(f"- {info.name}({args}): {desc[0] if desc else ''}")
        if not rows:
            return (
                "No matching tools." if _extra_tools(reg, ctx) else "No extra tools are available."
            )
        extra = len(rows) - MAX_LISTED
        more = f"\n[{extra} more; narrow the query]" if extra > 0 else ""
        return "\n".join(rows[:MAX_LISTED]) + more

    @reg.tool(level="allow")
    async def use_tool(
        name: str, arguments: dict[str, Any] | None = None, *, ctx: ToolContext
    ) -> ToolResult:
        """Call a tool found with list_available_tools.

        Args:
            name: The tool name exactly as listed.
            arguments: The tool's arguments as a JSON object.
        """
        info = reg.get(name)
        if info is None or info.native:
            hint = did_you_mean(name, (i.name for i in _extra_tools(reg, ctx)), n=3, cutoff=0.5)
            raise ToolError(f"no extra tool named {name!r}{hint}. Use list_available_tools.")
        args = arguments or {}
        if isinstance(args, str):
            try:
                args = json.loads(args)
            except json.JSONDecodeError as e:
                raise ToolError("arguments must be a JSON object") from e
        return await reg.run(info, args, ctx, shape=False)


def _extra_tools(reg: ToolRegistry, ctx: ToolContext) -> list[ToolInfo]:
    """Catalog tools, and MCP tools the session's head does not declare (they came later)."""
    declared = ctx.declared

    def is_extra(info: ToolInfo) -> bool:
        if info.expose == "catalog":
            return True
        return not info.native and declared is not None and info.name not in declared

    return [i for i in reg.tools() if is_extra(i)]
