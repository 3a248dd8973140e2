"""Render one agent turn into Discord messages: streamed edits, a tool status line, the final split.

Job: :class:`ReplyStream` receives the turn's :data:`AgentEvent` s and keeps at most two live
messages up to date: the reply (edited as text streams in) and, once a tool runs, one status
line (edited, never one message per tool). :meth:`finish` writes the final text, split into
extra messages when it is longer than Discord's 2,000 characters.

Invariants:
- Edits to Discord happen at most once per ``edit_interval`` seconds while streaming; the
  final write is immediate, and when its edit fails the final text is sent as a new message.
- Every Discord HTTP call has a timeout and its errors (rate limit, forbidden, not found) are
  logged with :func:`log_event` and never raised: a failing channel cannot kill the bot.
- A failed turn shows one short line (``⚠️ ...``); no traceback ever reaches the chat.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable
from typing import TypeVar

import discord

from luna.frontends.discord.split import DISCORD_LIMIT, split_message
from luna.messages import (
    AgentEvent,
    Status,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnDone,
    TurnFailed,
)
from luna.observe import log_event

log = logging.getLogger(__name__)

HTTP_TIMEOUT = 30.0
MAX_ERROR_CHARS = 300
EMPTY_REPLY = "_(no reply)_"
T = TypeVar("T")


def short_line(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """First non-empty line of ``text``, cut to ``limit`` characters."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


async def safe_call(op: str, coro: Awaitable[T]) -> T | None:
    """Await a Discord HTTP call with a timeout; log and return None on failure."""
    try:
        return await asyncio.wait_for(coro, HTTP_TIMEOUT)
    except discord.HTTPException as e:
        log.warning("discord %s failed: %s %s", op, e.status, e.code)
        log_event("discord_error", op=op, status=e.status, code=e.code)
    except TimeoutError:
        log.warning("discord %s timed out", op)
        log_event("discord_error", op=op, error="timeout")
    return None


class ReplyStream:
    """The live reply and status messages of one turn in one channel."""

    def __init__(self, channel: discord.abc.Messageable, *, edit_interval: float) -> None:
        self.channel = channel
        self.edit_interval = max(0.0, edit_interval)
        self.text = ""
        self.final: str | None = None
        self.error: str | None = None
        self.reply_messages: list[discord.Message] = []
        self.status_message: discord.Message | None = None
        self._reply_msg: discord.Message | None = None
        self._shown = ""
        self._tools: list[str] = []
        self._failed = 0
        self._running: dict[str, str] = {}
        self._waiting = ""  # what the turn waits for (the server loading, a long prefill)
        self._status_dirty = False
        self._last_write = 0.0
        self._flush_task: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    # ---- events ------------------------------------------------------------------------

    async def feed(self, event: AgentEvent) -> None:
        if isinstance(event, TextDelta):
            self.text += event.text
            self._schedule()
        elif isinstance(event, ToolStarted):
            self._tools.append(event.name)
            self._running[event.call_id] = event.name
            self._status_dirty = True
            self._schedule()
        elif isinstance(event, ToolFinished):
            self._running.pop(event.call_id, None)
            self._failed += int(event.is_error)
            self._status_dirty = True
            self._schedule()
        elif isinstance(event, TurnDone):
            self.final = event.reply
        elif isinstance(event, TurnFailed):
            self.error = short_line(event.message) or "The turn failed."
        elif isinstance(event, Status):
            self._waiting = event.text
            self._status_dirty = True
            self._schedule()

    def fail(self, line: str) -> None:
        """Mark the turn failed with one short line for the user."""
        self.error = short_line(line) or "The turn failed."

    def status_text(self, *, done: bool = False) -> str:
        if not self._tools:
            return "" if done else f"-# ⏳ {self._waiting}"[:DISCORD_LIMIT]
        counts: dict[str, int] = {}
        for name in self._tools:
            counts[name] = counts.get(name, 0) + 1
        used = ", ".join(f"`{n}`" + (f" ×{c}" if c > 1 else "") for n, c in counts.items())
        failed = f" ({self._failed} failed)" if self._failed else ""
        if not done and self._running:
            running = ", ".join(f"`{n}`" for n in dict.fromkeys(self._running.values()))
            return f"-# 🔧 running {running}… (used: {used}){failed}"[:DISCORD_LIMIT]
        return f"-# 🔧 used {used}{failed}"[:DISCORD_LIMIT]

    # ---- writing -----------------------------------------------------------------------

    def _schedule(self) -> None:
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = asyncio.get_running_loop().create_task(self._flush_later())

    async def _flush_later(self) -> None:
        wait = self._last_write + self.edit_interval - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        await self._flush(live=True)

    async def _flush(self, *, live: bool) -> None:
        async with self._lock:
            if self._status_dirty:
                self._status_dirty = False
                await self._write_status(self.status_text(done=not live))
            if live:
                preview = self.text
                if len(preview) > DISCORD_LIMIT:
                    preview = "…" + preview[-(DISCORD_LIMIT - 1) :]
                if preview.strip() and preview != self._shown:
                    self._reply_msg = await self._write(self._reply_msg, preview, "reply")
                    if self._reply_msg is not None:
                        self._shown = preview
            self._last_write = time.monotonic()

    async def _write(
        self, msg: discord.Message | None, content: str, what: str, *, is_final: bool = False
    ) -> discord.Message | None:
        """Edit ``msg`` to ``content`` (or send it when there is none / it was deleted).

        A failed streaming edit keeps the old message (the next edit catches up); a failed
        final edit sends ``content`` as a new message, so the answer is never lost.
        """
        if msg is not None:
            try:
                return await asyncio.wait_for(msg.edit(content=content), HTTP_TIMEOUT)
            except discord.NotFound:
                log_event("discord_error", op=f"edit_{what}", status=404)
            except discord.HTTPException as e:
                log.warning("discord edit_%s failed: %s %s", what, e.status, e.code)
                log_event("discord_error", op=f"edit_{what}", status=e.status, code=e.code)
                if not is_final:
                    return msg
            except TimeoutError:
                log_event("discord_error", op=f"edit_{what}", error="timeout")
                if not is_final:
                    return msg
        return await safe_call(f"send_{what}", self.channel.send(content))

    async def _write_status(self, content: str) -> None:
        if not content:  # a waiting line with nothing left to say: remove it
            if self.status_message is not None:
                await safe_call("delete_status", self.status_message.delete())
                self.status_message = None
            return
        self.status_message = await self._write(self.status_message, content, "status")

    async def finish(self) -> None:
        """Stop streaming and write the final status line and reply."""
        task = self._flush_task
        if task is not None and not task.done():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self._tools or self.status_message is not None:
            self._status_dirty = True
        await self._flush(live=False)
        if self.error is not None:
            body = f"⚠️ {self.error}"
        else:
            body = self.final if self.final and self.final.strip() else self.text
            if not body.strip():
                body = EMPTY_REPLY
        chunks = split_message(body) or [EMPTY_REPLY]
        async with self._lock:
            first = await self._write(self._reply_msg, chunks[0], "reply", is_final=True)
            self._reply_msg = first
            self.reply_messages = [first] if first is not None else []
            for chunk in chunks[1:]:
                sent = await safe_call("send_reply", self.channel.send(chunk))
                if sent is not None:
                    self.reply_messages.append(sent)
