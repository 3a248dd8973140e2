"""A trivial real tool for tests and benchmarks that need one: ``echo``."""

from __future__ import annotations

from luna.config import Config
from luna.tools.registry import ToolRegistry


def register_echo(registry: ToolRegistry) -> ToolRegistry:
    """Register ``echo(text)`` (level allow), which answers ``echo: <text>``."""

    @registry.tool(level="allow")
    async def echo(text: str) -> str:
        """Repeat the text back.

        Args:
            text: what to repeat
        """
        return f"echo: {text}"

    return registry


def echo_registry(cfg: Config) -> ToolRegistry:
    """A fresh registry holding only ``echo``."""
    return register_echo(ToolRegistry(cfg))
