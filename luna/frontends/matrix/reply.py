"""One turn's answer in a Matrix room: sent once, then kept up to date by ``m.replace`` edits.

Job: :class:`ReplyStream` takes the turn's :data:`~luna.messages.AgentEvent` s; the first
text sends a message (in the thread, or as a reply to the message answered), later text edits
it at most once per ``edit_interval``; :meth:`finish` writes the final text, the parts past
the first going out as further messages.

Invariants:
- While streaming, only the first part (``part_bytes``) is shown; the final write splits the
  whole reply with :func:`luna.frontends.matrix.render.split`, so no event exceeds the
  homeserver's size limit.
- Rate limits are the outbox's business (it waits ``retry_after_ms``); a send that still fails
  is logged and the stream goes on: one failed edit never loses the final text (the last
  write is retried as a new message when its edit fails).
- A failed turn shows one short line (``⚠️ …``); no traceback reaches the room.
"""

from __future__ import annotations

import logging
import time

from luna.errors import MatrixError
from luna.frontends.matrix import render
from luna.frontends.matrix.outbox import Outbox
from luna.messages import AgentEvent, TextDelta, TurnDone, TurnFailed
from luna.observe import log_event

log = logging.getLogger(__name__)

EMPTY_REPLY = "_(no reply)_"


class ReplyStream:
    def __init__(
        self,
        outbox: Outbox,
        room_id: str,
        *,
        thread_root: str | None,
        reply_to: str | None,
        edit_interval: float,
        part_bytes: int = render.DEFAULT_PART_BYTES,
    ) -> None:
        self.outbox = outbox
        self.room_id = room_id
        self.thread_root = thread_root
        self.reply_to = reply_to
        self.edit_interval = edit_interval
        self.part_bytes = part_bytes
        self.text = ""
        self.final: str | None = None
        self.event_id: str | None = None  # the first (streamed) message
        self.shown = ""
        self.sent_ids: list[str] = []
        self._last_write = 0.0

    async def feed(self, event: AgentEvent) -> None:
        if isinstance(event, TextDelta):
            self.text += event.text
            if time.monotonic() - self._last_write >= self.edit_interval:
                await self._show(render.split(self.text, self.part_bytes)[0])
        elif isinstance(event, TurnDone):
            self.final = event.reply
        elif isinstance(event, TurnFailed):
            self.fail(event.message)

    def fail(self, line: str) -> None:
        self.final = f"{self.text}\n\n⚠️ {line}".strip() if self.text else f"⚠️ {line}"

    async def _send_new(self, markdown: str) -> str | None:
        content = render.message(markdown, thread_root=self.thread_root, reply_to=self.reply_to)
        try:
            event_id = await self.outbox.send(self.room_id, "m.room.message", content)
        except MatrixError as e:
            log_event("matrix_error", op="send", error=str(e))
            return None
        self.sent_ids.append(event_id)
        return event_id

    async def _show(self, markdown: str) -> bool:
        """Show ``markdown`` in the first message (send or edit); False when that failed."""
        if not markdown.strip() or markdown == self.shown:
            return True
        self._last_write = time.monotonic()
        if self.event_id is None:
            self.event_id = await self._send_new(markdown)
            ok = self.event_id is not None
        else:
            try:
                edit_id = await self.outbox.send(
                    self.room_id, "m.room.message", render.edit(self.event_id, markdown)
                )
                self.sent_ids.append(edit_id)
                ok = True
            except MatrixError as e:
                log_event("matrix_error", op="edit", error=str(e))
                ok = False
        if ok:
            self.shown = markdown
        return ok

    async def finish(self) -> None:
        """Write the final text: the first part into the first message, the rest after it."""
        text = self.final if self.final is not None else self.text
        parts = render.split(text.strip() or EMPTY_REPLY, self.part_bytes)
        if not await self._show(parts[0]) and self.event_id is not None:
            await self._send_new(parts[0])  # the edit failed: the final text still arrives
        for part in parts[1:]:
            await self._send_new(part)
