"""Tool approvals on Matrix: a prompt in the room, answered by the owner's reaction or reply.

Job: :class:`Approvals` keeps the prompts waiting for an answer; :meth:`Approvals.approver`
gives a turn its :data:`~luna.messages.Approver`, and the front-end offers every reaction
and reply it sees to :meth:`Approvals.answer` first.

Invariants:
- Only the owner's answer counts: ✅/👍 (reaction) or "yes"/"y"/"ok" (a reply to the prompt)
  allows; ❌/👎 or "no"/"n" denies; anything else, and anyone else's answer, is not an answer.
- No answer within the timeout (a little under ``tools.approval_timeout``) denies. A prompt
  that cannot be sent denies. Each prompt is answered once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from luna.errors import MatrixError
from luna.frontends.matrix import render
from luna.messages import Approver
from luna.observe import log_event

ALLOW_KEYS = frozenset({"✅", "👍", "👍️"})
DENY_KEYS = frozenset({"❌", "👎", "👎️"})
ALLOW_WORDS = frozenset({"yes", "y", "ok", "allow"})
DENY_WORDS = frozenset({"no", "n", "deny"})
ARGS_PREVIEW_CHARS = 600

Send = Callable[[dict[str, Any]], Awaitable[str]]  # sends content where the turn answers


def verdict(answer: str) -> bool | None:
    """True (allow), False (deny) or None (not an answer) for a reaction key or reply text."""
    word = answer.strip().lower().rstrip(".!")
    if answer.strip() in ALLOW_KEYS or word in ALLOW_WORDS:
        return True
    if answer.strip() in DENY_KEYS or word in DENY_WORDS:
        return False
    return None


class Approvals:
    """Prompts waiting for the owner, by the prompt's event id."""

    def __init__(self, owner: str, timeout: float) -> None:
        self.owner = owner
        self.timeout = timeout
        self._pending: dict[str, asyncio.Future[bool]] = {}

    def answer(self, sender: str, prompt_event_id: str, answer: str) -> bool:
        """Offer an answer; True when it settled a prompt (the caller then drops it)."""
        future = self._pending.get(prompt_event_id)
        if future is None or future.done() or sender != self.owner:
            return False
        decision = verdict(answer)
        if decision is None:
            return False
        future.set_result(decision)
        return True

    def approver(self, send: Send) -> Approver:
        async def ask(tool_name: str, args: dict[str, Any]) -> bool:
            preview = json.dumps(args, ensure_ascii=False, default=str)[:ARGS_PREVIEW_CHARS]
            text = (
                f"🔐 May I run `{tool_name}`?\n```json\n{preview}\n```\n"
                "React ✅ to allow or ❌ to deny, or reply yes/no "
                f"(denied after {self.timeout:g} s)."
            )
            try:
                prompt_id = await send(render.notice(text))
            except MatrixError as e:
                log_event("tool_approval", tool=tool_name, outcome="denied", reason=str(e))
                return False
            future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
            self._pending[prompt_id] = future
            wait = self.timeout - min(1.0, self.timeout * 0.1)
            try:
                allowed = await asyncio.wait_for(future, wait)
                outcome = "approved" if allowed else "denied"
            except TimeoutError:
                allowed, outcome = False, "timeout"
            finally:
                self._pending.pop(prompt_id, None)
            log_event("tool_approval", tool=tool_name, outcome=outcome)
            return allowed

        return ask
