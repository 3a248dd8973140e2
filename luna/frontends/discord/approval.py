"""Ask the owner on Discord whether an ``ask`` tool may run.

Job: :class:`ReactionApprover` is an :data:`luna.messages.Approver`: it posts one prompt in
the conversation's channel, adds ✅ and ❌, and waits for the owner's reaction.

Invariants:
- Only a reaction by ``discord.owner_id`` counts; anyone else's (and the bot's own) is ignored.
- No answer within ``tools.approval_timeout`` seconds means deny; so does a missing owner id or
  a prompt that could not be posted.
- The prompt is edited to show the outcome; Discord errors are logged, never raised.
- The owner sees everything they approve: a call whose arguments do not fit the message
  comes with them in full as an attached text file (``approval_text``).
"""

from __future__ import annotations

import asyncio
import io
import json
from typing import Any

import discord

from luna.frontends.discord.reply import safe_call
from luna.observe import log_event
from luna.tools.permissions import approval_text

APPROVE = "✅"
DENY = "❌"
ARGS_PREVIEW_CHARS = 600


def describe_args(args: dict[str, Any], limit: int = ARGS_PREVIEW_CHARS) -> str:
    """A short, code-block-safe rendering of tool arguments."""
    text = json.dumps(args, ensure_ascii=False, default=str)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("```", "`\u200b``")


class ReactionApprover:
    """Approver that asks the owner with a ✅/❌ reaction on a prompt message."""

    def __init__(
        self,
        client: discord.Client,
        channel: discord.abc.Messageable,
        *,
        owner_id: int,
        timeout: float,
    ) -> None:
        self.client = client
        self.channel = channel
        self.owner_id = owner_id
        self.timeout = timeout

    async def __call__(self, tool_name: str, args: dict[str, Any]) -> bool:
        if not self.owner_id:
            log_event("tool_approval", tool=tool_name, outcome="denied", reason="no owner_id")
            return False
        preview = describe_args(args)
        full = approval_text(args)
        # The preview was cut: the whole text goes with it as a file.
        attached = len(json.dumps(args, ensure_ascii=False, default=str)) > ARGS_PREVIEW_CHARS
        prompt = (
            f"🔐 <@{self.owner_id}> may I run `{tool_name}`?\n"
            f"```json\n{preview}\n```"
            + ("The whole text is in the attached file.\n" if attached else "")
            + f"React {APPROVE} to allow or {DENY} to deny (denied after {self.timeout:g}s)."
        )
        files = (
            {"file": discord.File(io.BytesIO(full.encode()), filename=f"{tool_name}.txt")}
            if attached
            else {}
        )
        msg = await safe_call("send_approval", self.channel.send(prompt, **files))
        if msg is None:
            log_event("tool_approval", tool=tool_name, outcome="denied", reason="prompt failed")
            return False

        def check(payload: discord.RawReactionActionEvent) -> bool:
            return (
                payload.message_id == msg.id
                and payload.user_id == self.owner_id
                and str(payload.emoji) in (APPROVE, DENY)
            )

        # Listen before adding our own reactions: a quick owner must not be missed. Answer a
        # little before the registry's own approval timeout would cancel us.
        wait = self.timeout - min(1.0, self.timeout * 0.1)
        waiter = asyncio.ensure_future(
            self.client.wait_for("raw_reaction_add", check=check, timeout=wait)
        )
        try:
            for emoji in (APPROVE, DENY):
                await safe_call("add_reaction", msg.add_reaction(emoji))
            payload = await waiter
        except TimeoutError:
            allowed, outcome = False, "timeout"
        else:
            allowed = str(payload.emoji) == APPROVE
            outcome = "approved" if allowed else "denied"
        finally:
            waiter.cancel()
        log_event("tool_approval", tool=tool_name, outcome=outcome)
        shown = {"approved": "✅ allowed", "denied": "❌ denied", "timeout": "⏱️ no answer: denied"}
        await safe_call("edit_approval", msg.edit(content=f"-# 🔐 `{tool_name}`: {shown[outcome]}"))
        return allowed
