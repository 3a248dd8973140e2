"""Luna's tools: the registry, the native tools, the sandbox and permissions.

``build_registry(cfg)`` returns a ToolRegistry with every native tool registered; MCP tools are
added later by ``mcp_manager`` through ``ToolRegistry.register``. When bash cannot be sandboxed
a warning is logged here, at start-up, and bash asks before every command.
"""

from __future__ import annotations

import logging

from luna.config import Config
from luna.tools.builtin import catalog, files, papers, shell, subagents, web
from luna.tools.registry import SubAgentRunner, ToolContext, ToolInfo, ToolRegistry
from luna.tools.sandbox import sandbox_status, tool_env
from luna.tools.untrusted import wrap_untrusted

log = logging.getLogger(__name__)

__all__ = [
    "SubAgentRunner",
    "ToolContext",
    "ToolInfo",
    "ToolRegistry",
    "build_registry",
    "sandbox_status",
    "tool_env",
    "wrap_untrusted",
]


def build_registry(cfg: Config) -> ToolRegistry:
    """A registry with all native tools; logs a warning when bash runs unsandboxed."""
    reg = ToolRegistry(cfg)
    ok, detail = sandbox_status(cfg, probe=False)
    if not ok:
        log.warning("bash is not sandboxed: %s", detail)
    for module in (shell, files, web, subagents, papers, catalog):
        module.register(reg, cfg)
    return reg
