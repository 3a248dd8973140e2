"""Ask the owner, in the chat app, whether an ``ask`` tool may run.

Job: :class:`ChannelApprover` is an :data:`luna.messages.Approver`: it has the adapter post
one prompt in the conversation and waits for an answer; :class:`Approvals` is where the
adapter hands every answer it sees (a reaction, a button press), and where the rule of who
counts is kept.

Invariants:
- Only an owner's answer counts (``Access.is_owner``); anyone else's is refused and the
  adapter is told so, to tell them.
- No answer within ``tools.approval_timeout`` seconds (a little less, so the registry's own
  timeout never cancels the prompt mid-way) means deny; so does an app with no owner id set,
  or a prompt that could not be posted.
- The prompt is edited to show the outcome; adapter errors are logged, never raised.
- The owner sees everything they approve: when the JSON preview is cut, the request carries
  the whole text (``approval_text``) for the adapter to show.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

from luna.frontends.channels.access import Access
from luna.frontends.channels.contract import ApprovalRequest, ChannelAdapter
from luna.frontends.channels.sending import attempt
from luna.observe import log_event
from luna.tools.permissions import approval_text

ARGS_PREVIEW_CHARS = 600
Answer = Literal["counted", "not_owner", "unknown"]
SHOWN = {"approved": "✅ allowed", "denied": "❌ denied", "timeout": "⏱️ no answer: denied"}


def describe_args(args: dict[str, Any], limit: int = ARGS_PREVIEW_CHARS) -> str:
    """A short, code-block-safe rendering of tool arguments."""
    text = json.dumps(args, ensure_ascii=False, default=str)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("```", "`\u200b``")


class Approvals:
    """The prompts of one app still waiting for the owner, by the prompt message's id."""

    def __init__(self, access: Access) -> None:
        self.access = access
        self._waiting: dict[str, asyncio.Future[bool]] = {}

    def expect(self, prompt_id: str) -> asyncio.Future[bool]:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._waiting[prompt_id] = future
        return future

    def forget(self, prompt_id: str) -> None:
        future = self._waiting.pop(prompt_id, None)
        if future is not None and not future.done():
            future.cancel()

    def answer(self, prompt_id: str, user_id: str, allow: bool) -> Answer:
        """An answer to a prompt seen by the adapter; whether it counted."""
        future = self._waiting.get(prompt_id)
        if future is None or future.done():
            return "unknown"
        if not self.access.is_owner(user_id):
            log_event("tool_approval_refused", prompt=prompt_id, reason="not the owner")
            return "not_owner"
        future.set_result(allow)
        return "counted"


class ChannelApprover:
    """Approver that asks the owner in the conversation the turn came from."""

    def __init__(
        self, app: ChannelAdapter, conversation: object, approvals: Approvals, timeout: float
    ) -> None:
        self.app = app
        self.conversation = conversation
        self.approvals = approvals
        self.timeout = timeout

    async def __call__(self, tool_name: str, args: dict[str, Any]) -> bool:
        owners = tuple(sorted(self.approvals.access.owner_ids))
        if not owners:
            log_event("tool_approval", tool=tool_name, outcome="denied", reason="no owner id")
            return False
        cut = len(json.dumps(args, ensure_ascii=False, default=str)) > ARGS_PREVIEW_CHARS
        request = ApprovalRequest(
            tool=tool_name,
            preview=describe_args(args),
            full=approval_text(args),
            is_cut=cut,
            owner_ids=owners,
            timeout=self.timeout,
        )
        prompt = await attempt(
            self.app.name,
            "send_approval",
            lambda: self.app.post_approval(self.conversation, request),
        )
        if prompt is None:
            log_event("tool_approval", tool=tool_name, outcome="denied", reason="prompt failed")
            return False
        answer = self.approvals.expect(prompt.message_id)  # before any answer can come
        await attempt(self.app.name, "offer_choices", lambda: self.app.offer_choices(prompt))
        wait = self.timeout - min(1.0, self.timeout * 0.1)
        try:
            allowed = await asyncio.wait_for(answer, wait)
        except TimeoutError:
            allowed, outcome = False, "timeout"
        else:
            outcome = "approved" if allowed else "denied"
        finally:
            self.approvals.forget(prompt.message_id)
        log_event("tool_approval", tool=tool_name, outcome=outcome)
        text = f"{self.app.status_prefix}🔐 `{tool_name}`: {SHOWN[outcome]}"
        await attempt(self.app.name, "edit_approval", lambda: self.app.edit(prompt, text))
        return allowed
