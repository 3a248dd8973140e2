"""The environment a test gives a real ``python -m luna`` subprocess.

Invariant: the child sees none of the developer's Luna settings or secrets, imports this
checkout, and never reaches for a model hub.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def clean_env(**extra: str) -> dict[str, str]:
    """The current environment minus Luna's variables and secrets, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LUNA_", "LLM_"))}
    env.pop("DISCORD_TOKEN", None)
    env.pop("TELEGRAM_TOKEN", None)
    env.update(PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    env.update(extra)
    return env


def data_env(tmp_path: Path, endpoint: str, **extra: str) -> dict[str, str]:
    """``clean_env`` with every data path under ``tmp_path`` and the LLM at ``endpoint``."""
    return clean_env(
        LLM_ENDPOINT=endpoint,
        MEMORY_DB_PATH=str(tmp_path / "data" / "luna.db"),
        LOG_DIR=str(tmp_path / "data" / "logs"),
        LUNA_WORKSPACE=str(tmp_path / "workspace"),
        LUNA_MCP_SERVERS=str(tmp_path / "mcp_servers.json"),
        LUNA_OUTPUTS_DIR=str(tmp_path / "data" / "tool_outputs"),
        **extra,
    )
