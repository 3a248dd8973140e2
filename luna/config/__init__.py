"""Configuration: frozen models (``schema``) loaded once from config.toml plus the environment
(``loader``), and the ``config show/set`` commands (``cli``).

Imports only ``luna.errors`` and pydantic: every other package may import this one.
"""

from luna.config.loader import (
    ENV_OVERRIDES,
    bounds_of,
    build_config,
    default_config_path,
    effective_items,
    field_types,
    is_llm_endpoint_explicit,
    load_config,
    mask_secret,
    read_toml,
    secret_values,
)
from luna.config.schema import (
    DEFAULT_ENDPOINT,
    DEFAULT_MODEL,
    DEFAULT_SYSTEM_PROMPT,
    PERMISSION_LEVELS,
    SECRET_KEYS,
    SECTIONS,
    AgentConfig,
    Config,
    DiscordConfig,
    LLMConfig,
    MCPConfig,
    MemoryConfig,
    ObserveConfig,
    PermissionLevel,
    SchedulerConfig,
    ToolsConfig,
    WebConfig,
)

__all__ = [
    "DEFAULT_ENDPOINT",
    "DEFAULT_MODEL",
    "DEFAULT_SYSTEM_PROMPT",
    "ENV_OVERRIDES",
    "PERMISSION_LEVELS",
    "SECRET_KEYS",
    "SECTIONS",
    "AgentConfig",
    "Config",
    "DiscordConfig",
    "LLMConfig",
    "MCPConfig",
    "MemoryConfig",
    "ObserveConfig",
    "SchedulerConfig",
    "PermissionLevel",
    "ToolsConfig",
    "WebConfig",
    "bounds_of",
    "build_config",
    "default_config_path",
    "effective_items",
    "field_types",
    "is_llm_endpoint_explicit",
    "load_config",
    "mask_secret",
    "read_toml",
    "secret_values",
]
