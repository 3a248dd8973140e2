"""What every web handler reaches through ``state(request)``: the running parts, one object.

Invariant: built once per front-end in ``server``; handlers never import each other's globals.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from aiohttp import web

from luna.attachments.intake import Intake
from luna.config import Config
from luna.frontends.web.approvals import ApprovalBroker
from luna.frontends.web.auth import Guard
from luna.frontends.web.events import EventHub
from luna.frontends.web.turns import TurnRunner

if TYPE_CHECKING:  # hooks_api reaches the state through ``state(request)``; the parts are built
    from luna.agent import Agent  # by app
    from luna.frontends.web.hooks_api import HookDoor
    from luna.memory import Memory
    from luna.scheduler.service import SchedulerService
    from luna.tools.registry import ToolRegistry


@dataclass
class WebState:
    cfg: Config
    agent: Agent
    memory: Memory
    registry: ToolRegistry
    guard: Guard
    hub: EventHub
    broker: ApprovalBroker
    runner: TurnRunner
    scheduler: SchedulerService | None = None  # None when [scheduler] is off
    hooks: HookDoor | None = None  # None when no [hooks.*] is configured
    intake: Intake | None = None  # files sent with a message (None: files are refused)
    doctor_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


STATE: web.AppKey[WebState] = web.AppKey("luna_web", WebState)


def state(request: web.Request) -> WebState:
    return request.app[STATE]
