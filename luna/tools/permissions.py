"""Permission levels: which tools run freely, which ask the owner, which never run.

Resolution order (later wins): the level the tool was registered with → built-in front-end
defaults (in the REPL the owner is at the keyboard, so sandboxed bash and workspace file tools
run without asking) → ``tools.permissions`` → ``tools.repl_permissions`` /
``tools.discord_permissions`` / ``tools.web_permissions`` for that front-end.

Invariants:
- The result is always one of ``allow``, ``ask``, ``deny``; unknown values (already refused by
  config validation) fall back to ``ask``.
- The registry applies one more rule on top: bash without a working sandbox is ``ask`` unless
  configured ``deny``.
"""

from __future__ import annotations

from luna.config import PERMISSION_LEVELS, PermissionLevel, ToolsConfig

# Front-end defaults applied before the owner's config.
FRONTEND_DEFAULTS: dict[str, dict[str, PermissionLevel]] = {
    "repl": {
        "bash": "allow",
        "read_file": "allow",
        "write_file": "allow",
        "list_directory": "allow",
        "code_task": "allow",
    },
}


def resolve_level(
    cfg: ToolsConfig, tool: str, frontend: str, default: PermissionLevel
) -> PermissionLevel:
    """The effective level of ``tool`` when called from ``frontend``."""
    level: str = FRONTEND_DEFAULTS.get(frontend, {}).get(tool, default)
    level = cfg.permissions.get(tool, level)
    per_frontend = {
        "repl": cfg.repl_permissions,
        "discord": cfg.discord_permissions,
        "web": cfg.web_permissions,
    }
    level = per_frontend.get(frontend, {}).get(tool, level)
    return level if level in PERMISSION_LEVELS else "ask"  # type: ignore[return-value]
