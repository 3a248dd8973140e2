"""Discord as a channel adapter: the layer's calls as discord.py calls, its errors translated.

Job: :class:`DiscordAdapter` keeps the :class:`~luna.frontends.channels.contract.ChannelAdapter`
contract over a ``discord.Client``: a conversation is a ``discord.abc.Messageable`` (a DM,
thread or channel), a sent message keeps its ``discord.Message``.

Invariants:
- Every discord.py call goes through :func:`luna.frontends.discord.calls.call` (a timeout,
  its errors translated to the layer's).
- Replies are Discord Markdown already: text is sent as it is.
- An approval prompt mentions the owner, shows the arguments in a JSON block, attaches them
  in full as a text file when the block was cut, and gets ✅ and ❌ reactions to answer with.
"""

from __future__ import annotations

import io
from typing import Any

import discord

from luna.frontends.channels.contract import ApprovalRequest, Destination, IncomingFile, Sent
from luna.frontends.channels.download import fetch_capped
from luna.frontends.discord.calls import call
from luna.frontends.discord.delivery import destination
from luna.messages import Frontend

DISCORD_LIMIT = 2000
TYPING_EVERY = 8.0  # Discord shows "typing" for ~10 s per trigger
APPROVE = "✅"
DENY = "❌"


def incoming_file(att: discord.Attachment) -> IncomingFile:
    """A Discord attachment for the layer (downloaded only when read: whole through
    discord.py, or from its CDN URL up to a cap)."""

    async def read() -> bytes:
        return await call(att.read())

    async def read_capped(limit: int) -> bytes:
        return await fetch_capped(att.url, limit)

    kind = "voice" if att.is_voice_message() else "document"
    return IncomingFile(att.filename, att.size, att.content_type, read, kind, read_capped)


class DiscordAdapter:
    """The channel layer's calls on Discord."""

    name: Frontend = "discord"
    limit = DISCORD_LIMIT
    typing_every = TYPING_EVERY
    status_prefix = "-# "

    def __init__(self, client: discord.Client, *, edit_interval: float) -> None:
        self.client = client
        self.edit_interval = edit_interval

    async def send(self, conversation: Any, text: str) -> Sent:
        message = await call(conversation.send(text))
        return Sent(conversation, str(message.id), message)

    async def edit(self, sent: Sent, text: str) -> Sent:
        message = await call(sent.native.edit(content=text))
        return Sent(sent.conversation, str(message.id), message)

    async def delete(self, sent: Sent) -> None:
        await call(sent.native.delete())

    async def typing(self, conversation: Any) -> None:
        await call(conversation.typing())

    async def post_approval(self, conversation: Any, request: ApprovalRequest) -> Sent:
        owner = request.owner_ids[0]
        prompt = (
            f"🔐 <@{owner}> may I run `{request.tool}`?\n"
            f"```json\n{request.preview}\n```"
            + ("The whole text is in the attached file.\n" if request.is_cut else "")
            + f"React {APPROVE} to allow or {DENY} to deny "
            f"(denied after {request.timeout:g}s)."
        )
        files = {}
        if request.is_cut:
            data = io.BytesIO(request.full.encode())
            files = {"file": discord.File(data, filename=f"{request.tool}.txt")}
        message = await call(conversation.send(prompt, **files))
        return Sent(conversation, str(message.id), message)

    async def offer_choices(self, prompt: Sent) -> None:
        for emoji in (APPROVE, DENY):
            await call(prompt.native.add_reaction(emoji))

    async def destination(self, address: dict[str, Any]) -> Destination | None:
        return await destination(self.client, address)
