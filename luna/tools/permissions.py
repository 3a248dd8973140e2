"""Permission levels: which tools run freely, which ask the owner, which never run.

Resolution order (later wins): the level the tool was registered with → built-in front-end
defaults (in the REPL the owner is at the keyboard, so sandboxed bash and workspace file tools
run without asking) → ``tools.permissions`` → ``tools.repl_permissions`` /
``tools.discord_permissions`` / ``tools.telegram_permissions`` / ``tools.web_permissions``
for that front-end.

Invariants:
- The result is always one of ``allow``, ``ask``, ``deny``; unknown values (already refused by
  config validation) fall back to ``ask``.
- The registry applies one more rule on top: bash without a working sandbox is ``ask`` unless
  configured ``deny``.
- What the owner is asked to approve is shown in full (``approval_text``), by every
  front-end: a long command or a skill's whole text, never a preview cut at a few hundred
  characters.
"""

from __future__ import annotations

import json
from typing import Any

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
        "telegram": cfg.telegram_permissions,
        "web": cfg.web_permissions,
    }
    level = per_frontend.get(frontend, {}).get(tool, level)
    return level if level in PERMISSION_LEVELS else "ask"


APPROVAL_TEXT_LIMIT = 100_000  # past this (a huge write_file), the rest is counted, not shown


def approval_text(args: dict[str, Any], limit: int = APPROVAL_TEXT_LIMIT) -> str:
    """The arguments of a call waiting for approval, readable and in full: a long or
    multi-line string on lines of its own, anything else as JSON."""
    parts = []
    for key, value in args.items():
        if isinstance(value, str) and ("\n" in value or len(value) > 80):
            parts.append(f"{key}:\n{value}")
        else:
            parts.append(f"{key}: {json.dumps(value, ensure_ascii=False, default=str)}")
    text = "\n".join(parts)
    if len(text) > limit:
        text = text[:limit] + f"\n[... {len(text) - limit:,} more characters not shown]"
    return text
