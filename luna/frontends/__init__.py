"""Front-ends: where messages come from and replies go (terminal REPL, web, and the chat apps
Discord and Telegram on the channel layer, ``channels/``).

Each front-end builds ``InboundMessage`` s, runs them through ``Agent.run_turn`` and renders the
events. Front-ends may import anything below them; nothing below imports a front-end (a test
enforces it).

The contract every front-end module keeps, so ``app`` runs any of them without a branch:
- ``check(cfg)`` raises ConfigError before anything starts when its settings cannot work;
- ``make(parts, args)`` returns an object with ``name`` and ``async run(stop)``;
- ``run(stop)`` serves until ``stop`` is set or it ends by itself (EOF, ``/quit``, a lost bot
  connection raises). When ``stop`` is set it stops taking input, lets running turns finish
  within ``agent.shutdown_grace`` (``agent.drain``), then tears itself down.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from luna.config import Config

if TYPE_CHECKING:  # types only: importing luna.frontends must stay cheap (app's start-up)
    from luna.agent import Agent
    from luna.attachments.intake import Intake
    from luna.llm.contract import ChatModel
    from luna.mcp.manager import MCPManager
    from luna.memory import Memory
    from luna.scheduler.service import SchedulerService
    from luna.tools.registry import ToolRegistry

MODULES = {
    "repl": "luna.frontends.repl",
    "discord": "luna.frontends.discord.bot",
    "matrix": "luna.frontends.matrix.frontend",
    "telegram": "luna.frontends.telegram.frontend",
    "web": "luna.frontends.web",
}

# The chat apps, and the setting that turns each on.
CHAT_TOKENS: dict[str, Callable[[Config], str]] = {
    "discord": lambda cfg: cfg.discord.token,
    "telegram": lambda cfg: cfg.telegram.token,
}


@dataclass(frozen=True)
class Components:
    """The running parts a front-end may use (built by ``luna.app``)."""

    cfg: Config
    agent: Agent
    memory: Memory  # the whole facade: front-ends also browse, search and show history
    llm: ChatModel  # the chat role
    registry: ToolRegistry
    mcp: MCPManager
    banner: str = ""
    scheduler: SchedulerService | None = None  # None when [scheduler] is disabled
    intake: Intake | None = None  # files sent with a message; None: files are refused


class Frontend(Protocol):
    """What ``app`` runs: one per front-end, made by its module's ``make(parts, args)``."""

    name: str

    async def run(self, stop: asyncio.Event) -> int | None:
        """Serve until ``stop``; an exit code for the process (None: 0)."""
        ...


def chosen(cfg: Config, mode: str) -> list[str]:
    """The front-ends to run: ``repl`` on request, else the chat apps that are configured
    (Discord and Telegram by their token, Matrix by a homeserver and a login; the REPL when none
    is); plus ``web`` next to them when ``[web] enabled``. Mode ``web`` runs the web front-end
    alone (a service without chat apps, where no terminal is attached)."""
    if mode == "web":
        return ["web"]
    chats = [name for name, token in CHAT_TOKENS.items() if token(cfg)]
    if matrix_configured(cfg):
        chats.append("matrix")
    names = ["repl"] if mode == "repl" or not chats else chats
    return [*names, "web"] if cfg.web.enabled else names


def matrix_configured(cfg: Config) -> bool:
    """A homeserver and a login: Luna runs the Matrix front-end."""
    m = cfg.matrix
    return bool(m.homeserver and (m.access_token or m.password))


def check(names: list[str], cfg: Config, mode: str = "auto") -> None:
    """Each front-end's own start-up check; ``mode`` as for :func:`chosen` (a hint may depend
    on it: ``luna web`` runs the web page whatever ``web.enabled`` says)."""
    for name in names:
        module = importlib.import_module(MODULES[name])
        module.check(cfg, mode)


def make(names: list[str], parts: Components, args: argparse.Namespace) -> list[Frontend]:
    return [importlib.import_module(MODULES[name]).make(parts, args) for name in names]
