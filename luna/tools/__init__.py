"""Luna's tools: the registry, the native tools, the sandbox and permissions.

``build_registry(cfg, probe=...)`` returns a ToolRegistry with every native tool registered and
``registry.sandbox`` (a :class:`SandboxStatus`) set: the one place the sandbox is checked. MCP
tools are added later by ``MCPManager`` through ``ToolRegistry.register``. When bash cannot be
sandboxed a warning is logged here, once, and bash asks before every command.
"""

from __future__ import annotations

import logging

from luna.config import Config
from luna.tools.builtin import (
    catalog,
    files,
    images,
    papers,
    schedule,
    shell,
    skills,
    subagents,
    web,
)
from luna.tools.registry import SubAgentRunner, ToolContext, ToolInfo, ToolRegistry
from luna.tools.sandbox import SandboxStatus, sandbox_status, tool_env
from luna.tools.untrusted import wrap_untrusted

log = logging.getLogger(__name__)

__all__ = [
    "SandboxStatus",
    "SubAgentRunner",
    "ToolContext",
    "ToolInfo",
    "ToolRegistry",
    "build_registry",
    "sandbox_status",
    "tool_env",
    "wrap_untrusted",
]


def build_registry(cfg: Config, *, probe: bool = False) -> ToolRegistry:
    """A registry with all native tools and the sandbox status checked once.

    ``probe=True`` also starts bwrap once to see that namespaces work (a short subprocess: call
    it off the event loop, e.g. ``await asyncio.to_thread(build_registry, cfg, probe=True)``).
    When bash cannot be sandboxed, the warning is logged here and the registry makes bash ask.
    """
    status = sandbox_status(cfg, probe=probe)
    if not status.ok:
        log.warning("bash is not sandboxed: %s", status.detail)
    reg = ToolRegistry(cfg, sandbox=status)
    for module in (shell, files, images, web, subagents, papers, schedule, skills, catalog):
        module.register(reg, cfg)
    return reg
