"""Ask the owner on the page (or through the API) whether an ``ask`` tool may run.

Job: :class:`ApprovalBroker` hands each turn an :data:`luna.messages.Approver` that files a
pending approval, announces it on the event hub, and waits for ``approve`` or ``deny`` from
``POST /api/approvals/{id}``.

Invariants (the same rule as Discord's ``ReactionApprover``):
- No answer within ``tools.approval_timeout`` seconds means deny; the broker answers a little
  before the registry's own timeout would cancel it, so the outcome is always logged.
- An approval is decided once: a second decision, or one after the deadline, is refused.
- When the front-end stops, every pending approval is denied.
- Each outcome is one ``tool_approval`` event in the log (``frontend="web"``).
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from luna.messages import Approver
from luna.observe import log_event
from luna.tools.permissions import approval_text


@dataclass
class Pending:
    """One approval waiting for the owner."""

    id: str
    session_id: str
    tool: str
    arguments: str
    created: float  # wall clock, seconds
    expires: float  # wall clock, seconds
    future: asyncio.Future[bool] = field(repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "session_id": self.session_id,
            "tool": self.tool,
            "arguments": self.arguments,
            "created": self.created,
            "expires": self.expires,
        }


class ApprovalBroker:
    """Pending approvals of the web front-end; see the module docstring for the rules."""

    def __init__(self, timeout: float, publish: Callable[[dict[str, Any]], None]) -> None:
        self.timeout = timeout
        self.publish = publish
        self._pending: dict[str, Pending] = {}

    def pending(self) -> list[dict[str, Any]]:
        """The approvals still waiting, oldest first."""
        return [p.to_json() for p in sorted(self._pending.values(), key=lambda p: p.created)]

    def approver(self, session_id: str) -> Approver:
        """The Approver for turns of ``session_id``."""

        async def ask(tool: str, args: dict[str, Any]) -> bool:
            return await self._ask(session_id, tool, args)

        return ask

    async def _ask(self, session_id: str, tool: str, args: dict[str, Any]) -> bool:
        wait = self.timeout - min(1.0, self.timeout * 0.1)
        now = time.time()
        item = Pending(
            id=secrets.token_urlsafe(9),
            session_id=session_id,
            tool=tool,
            arguments=approval_text(args),  # in full: the owner sees what they approve
            created=now,
            expires=now + wait,
            future=asyncio.get_running_loop().create_future(),
        )
        self._pending[item.id] = item
        self.publish({"type": "approval", "session_id": session_id, "approval": item.to_json()})
        try:
            allowed = await asyncio.wait_for(asyncio.shield(item.future), wait)
            outcome = "approved" if allowed else "denied"
        except TimeoutError:
            allowed, outcome = False, "timeout"
        finally:
            self._pending.pop(item.id, None)
        log_event("tool_approval", tool=tool, outcome=outcome, frontend="web")
        self.publish(
            {
                "type": "approval_resolved",
                "session_id": session_id,
                "id": item.id,
                "tool": tool,
                "outcome": outcome,
            }
        )
        return allowed

    def decide(self, approval_id: str, allow: bool) -> bool:
        """Answer one pending approval; False when it is unknown, expired or already answered."""
        item = self._pending.get(approval_id)
        if item is None or item.future.done() or time.time() > item.expires:
            return False
        item.future.set_result(allow)
        return True

    def deny_all(self) -> None:
        """Deny everything still waiting (the front-end is stopping)."""
        for item in list(self._pending.values()):
            if not item.future.done():
                item.future.set_result(False)
