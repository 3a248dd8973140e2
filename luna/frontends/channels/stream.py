"""Render one agent turn into a chat app: streamed edits, a tool status line, the final split.

Job: :class:`ReplyStream` receives the turn's :data:`AgentEvent` s and keeps at most two live
messages up to date through a :class:`~luna.frontends.channels.contract.ChannelAdapter`: the
reply (edited as text streams in) and, once a tool runs, one status line (edited, never one
message per tool) that also carries the latest progress line (a long MCP call's percentage,
a long prefill) until the next tool starts or ends. :meth:`finish` writes the final text,
split at the app's ``limit``.

Invariants:
- While streaming, the app is written to at most once per ``edit_interval`` seconds, and never
  before a rate limit's ``retry_after`` has passed (nor are the final writes: they wait for
  a limit a live write met); a failed live edit keeps the old message (the next one catches
  up).
- The final reply is never lost: a rate limit is waited out, a failed edit becomes a new
  message, and a chunk the app still finds too long is halved until it fits. A live write
  already sent is waited for, never cancelled (a cancelled send would leave a message the
  stream does not know of, and the final text would come twice).
- No adapter error is raised out of here: each is logged (``luna.frontends.channels.sending``).
- A failed turn shows one short line (``⚠️ ...``); no traceback ever reaches the chat.
"""

from __future__ import annotations

import asyncio
import logging
import time

from luna.frontends.channels.contract import (
    ChannelAdapter,
    ChannelError,
    MessageGoneError,
    RateLimitedError,
    Sent,
    TooLongError,
)
from luna.frontends.channels.sending import CALL_TIMEOUT, attempt, send_text
from luna.frontends.channels.split import MIN_LIMIT, split_message
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

MAX_ERROR_CHARS = 300
EMPTY_REPLY = "_(no reply)_"


def short_line(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """First non-empty line of ``text``, cut to ``limit`` characters."""
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


class ReplyStream:
    """The live reply and status messages of one turn in one conversation."""

    def __init__(self, app: ChannelAdapter, conversation: object) -> None:
        self.app = app
        self.conversation = conversation
        self.limit = app.limit
        self.edit_interval = max(0.0, app.edit_interval)
        self.text = ""
        self.final: str | None = None
        self.error: str | None = None
        self.reply_messages: list[Sent] = []
        self.status_message: Sent | None = None
        self._reply_msg: Sent | None = None
        self._shown = ""
        self._tools: list[str] = []
        self._failed = 0
        self._running: dict[str, str] = {}
        self._waiting = ""  # what the turn waits for (the server loading, a long prefill)
        self._status_dirty = False
        self._last_write = 0.0
        self._not_before = 0.0  # a rate limit's end (monotonic)
        self._flush_task: asyncio.Task[None] | None = None
        self._writing = False
        self._lock = asyncio.Lock()

    # ---- events ------------------------------------------------------------------------

    async def feed(self, event: AgentEvent) -> None:
        if isinstance(event, TextDelta):
            self.text += event.text
            self._schedule()
        elif isinstance(event, ToolStarted):
            self._tools.append(event.name)
            self._running[event.call_id] = event.name
            self._waiting = ""  # an earlier call's progress is not this one's
            self._status_dirty = True
            self._schedule()
        elif isinstance(event, ToolFinished):
            self._running.pop(event.call_id, None)
            self._failed += int(event.is_error)
            self._waiting = ""
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
        mark = self.app.status_prefix
        if not self._tools:
            return "" if done else f"{mark}⏳ {self._waiting}"[: self.limit]
        counts: dict[str, int] = {}
        for name in self._tools:
            counts[name] = counts.get(name, 0) + 1
        used = ", ".join(f"`{n}`" + (f" ×{c}" if c > 1 else "") for n, c in counts.items())
        failed = f" ({self._failed} failed)" if self._failed else ""
        now = f" · {self._waiting}" if self._waiting and not done else ""
        if not done and self._running:
            running = ", ".join(f"`{n}`" for n in dict.fromkeys(self._running.values()))
            return f"{mark}🔧 running {running}…{now} (used: {used}){failed}"[: self.limit]
        return f"{mark}🔧 used {used}{failed}{now}"[: self.limit]

    # ---- writing -----------------------------------------------------------------------

    def _schedule(self) -> None:
        if self._flush_task is None or self._flush_task.done():
            self._flush_task = asyncio.get_running_loop().create_task(self._flush_later())

    async def _flush_later(self) -> None:
        due = max(self._last_write + self.edit_interval, self._not_before)
        wait = due - time.monotonic()
        if wait > 0:
            await asyncio.sleep(wait)
        self._writing = True  # from here on, finish() waits for this write instead of cutting it
        try:
            await self._flush(live=True)
        finally:
            self._writing = False

    async def _flush(self, *, live: bool) -> None:
        async with self._lock:
            if self._status_dirty:
                self._status_dirty = False
                await self._write_status(self.status_text(done=not live))
            if live:
                preview = self.text
                if len(preview) > self.limit:
                    preview = "…" + preview[-(self.limit - 1) :]
                if preview.strip() and preview != self._shown:
                    self._reply_msg = await self._write(self._reply_msg, preview, "reply")
                    if self._reply_msg is not None:
                        self._shown = preview
            self._last_write = time.monotonic()

    async def _write(
        self, msg: Sent | None, content: str, what: str, *, is_final: bool = False
    ) -> Sent | None:
        """Edit ``msg`` to ``content`` (or send it when there is none / it was deleted).

        A failed streaming edit keeps the old message (the next edit catches up) and a rate
        limit holds every write until it ends; a final edit waits a rate limit out, and when
        it still fails ``content`` is sent as a new message, so the answer is never lost.
        """
        name = self.app.name
        if msg is not None:
            try:
                return await asyncio.wait_for(self.app.edit(msg, content), CALL_TIMEOUT)
            except TooLongError:
                log_event("channel_error", frontend=name, op=f"edit_{what}", error="too_long")
                if not is_final:
                    return msg
                return await self._write_halves(msg, content, what)
            except MessageGoneError:
                log_event("channel_error", frontend=name, op=f"edit_{what}", status=404)
            except RateLimitedError as e:
                self._not_before = time.monotonic() + e.retry_after
                log_event("channel_rate_limited", frontend=name, op=f"edit_{what}",
                          retry_after=round(e.retry_after, 3))  # fmt: skip
                if not is_final:
                    return msg
                await asyncio.sleep(e.retry_after)
                edited = await attempt(name, f"edit_{what}", lambda: self.app.edit(msg, content))
                if edited is not None:
                    return edited
            except (ChannelError, TimeoutError) as e:
                log.warning("%s edit_%s failed: %s", name, what, e or "timeout")
                log_event("channel_error", frontend=name, op=f"edit_{what}",
                          error=type(e).__name__)  # fmt: skip
                if not is_final:
                    return msg
        if not is_final:
            if time.monotonic() < self._not_before:
                return msg  # a new message would break the rate limit too
            conversation = self.conversation  # a preview is never split: one message or none
            return await attempt(name, f"send_{what}", lambda: self.app.send(conversation, content))
        return await self.send(content, what)

    async def _write_halves(self, msg: Sent, content: str, what: str) -> Sent | None:
        """The app found the final text too long for ``msg``: its first half goes there, the
        rest in new messages."""
        parts = split_message(content, max(MIN_LIMIT, len(content) // 2))
        if len(parts) < 2:
            return await self.send(content, what)
        first = await self._write(msg, parts[0], what, is_final=True)
        for part in parts[1:]:
            await self.send(part, what)
        return first

    async def send(self, content: str, what: str = "reply") -> Sent | None:
        """Send ``content`` as a new message in this conversation."""
        return await send_text(self.app, self.conversation, content, what)

    async def _write_status(self, content: str) -> None:
        if not content:  # a waiting line with nothing left to say: remove it
            if self.status_message is not None:
                sent = self.status_message
                await attempt(self.app.name, "delete_status", lambda: self.app.delete(sent))
                self.status_message = None
            return
        self.status_message = await self._write(self.status_message, content, "status")

    async def finish(self) -> None:
        """Stop streaming and write the final status line and reply."""
        task = self._flush_task
        if task is not None and not task.done():
            if not self._writing:  # still waiting for its turn: not needed any more
                task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        wait = self._not_before - time.monotonic()
        if wait > 0:  # a live write met a rate limit: the final writes come after its end
            await asyncio.sleep(wait)
        if self._tools or self.status_message is not None:
            self._status_dirty = True
        await self._flush(live=False)
        if self.error is not None:
            body = f"⚠️ {self.error}"
        else:
            body = self.final if self.final and self.final.strip() else self.text
            if not body.strip():
                body = EMPTY_REPLY
        chunks = split_message(body, self.limit) or [EMPTY_REPLY]
        async with self._lock:
            first = await self._write(self._reply_msg, chunks[0], "reply", is_final=True)
            self._reply_msg = first
            self.reply_messages = [first] if first is not None else []
            for chunk in chunks[1:]:
                sent = await self.send(chunk)
                if sent is not None:
                    self.reply_messages.append(sent)
