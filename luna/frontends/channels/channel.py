"""One chat app's conversations with Luna: from an app's message to a rendered turn.

Job: :class:`Channel` takes the adapter's :class:`InboundEvent` s (:meth:`Channel.receive`),
decides who is heard (``access``), drops replays, merges bursts and runs one turn per session
at a time (``pipeline``), then runs each turn: the burst's files through the attachments
intake (``files``), a typing indicator, the approver, ``Agent.run_turn``, and the streamed
reply (``stream``). At start, :meth:`Channel.resume` answers the turns a dead process
committed but never answered (the app's ``ChannelLedger``).

Invariants:
- Nothing raised while handling one message stops the app: adapter errors are logged; a
  crashed turn shows the user one short line and logs the traceback; CancelledError
  propagates.
- Strangers (when allowed at all) get no tools and no approver.
- A burst's files go with its one turn, as the message's attachments; a file the intake
  refuses is one line to the model (in the text) and one to the user (a notice). Without an
  intake (``intake=None``) the burst's files are refused so, in one line.
- :class:`Receipts`, when given, hears of every event's fate: ``dropped`` (never a turn),
  ``stored`` (the turn's user message is committed: the app may acknowledge it) and
  ``answered`` (its reply was written). A replay of an event already admitted is none of
  them: the first copy's fate is the one that counts.
- A resumed turn is answered once, in the conversation its events came from, without its
  message being logged again (``stored_id``); its events are admitted first, so the app
  handing them over again in this process starts no second turn. An author no longer heard
  gets no answer: the turn is marked answered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from luna.attachments.intake import Intake
from luna.errors import LunaError
from luna.frontends.channels.access import Access, Speaker, is_heard
from luna.frontends.channels.approval import Approvals, ChannelApprover
from luna.frontends.channels.contract import ChannelAdapter, InboundEvent
from luna.frontends.channels.cursor import ChannelLedger
from luna.frontends.channels.files import (
    VOICE_NOTICE,
    has_voice,
    not_taken,
    refusal_notice,
    uploads_of,
)
from luna.frontends.channels.pipeline import Batch, Incoming, SessionPipeline
from luna.frontends.channels.sending import LIVE_PATIENCE, attempt, send_text
from luna.frontends.channels.stream import ReplyStream, short_line
from luna.messages import Attachment, InboundMessage
from luna.observe import log_event

if TYPE_CHECKING:
    from luna.agent import Agent

log = logging.getLogger(__name__)

GENERIC_FAILURE = "Something went wrong on my side; the details are in the log."


@dataclass(frozen=True)
class ChannelSettings:
    """What the layer needs from an app's config section (and ``tools``)."""

    burst_window: float
    max_attachment_bytes: int  # the app's own cap; the intake's applies too (the smaller wins)
    approval_timeout: float


class Receipts(Protocol):
    """An app that acknowledges what it received (Telegram's update offset)."""

    def dropped(self, event: InboundEvent) -> None: ...

    async def stored(self, events: Sequence[InboundEvent], message_id: int) -> None: ...

    async def answered(self, events: Sequence[InboundEvent]) -> None: ...


@dataclass(frozen=True)
class Job:
    """One admitted event waiting in the pipeline, with who sent it."""

    event: InboundEvent
    speaker: Speaker


class Channel:
    """The layer between one adapter and the agent."""

    def __init__(
        self,
        app: ChannelAdapter,
        agent: Agent,
        access: Access,
        settings: ChannelSettings,
        receipts: Receipts | None = None,
        *,
        intake: Intake | None,  # None: files are refused
    ) -> None:
        self.app = app
        self.agent = agent
        self.access = access
        self.settings = settings
        self.receipts = receipts
        self.intake = intake
        self.approvals = Approvals(access)
        self.pipeline = SessionPipeline(self.run_batch, burst_window=settings.burst_window)
        self._resumed: set[asyncio.Task[None]] = set()

    # ---- admission ---------------------------------------------------------------------

    def receive(self, event: InboundEvent) -> bool:
        """Admit ``event`` into its session's pipeline; False when it starts no turn."""
        speaker = self.access.speaker(event.author_id, is_bot=event.author_is_bot)
        heard = is_heard(is_private=event.is_private, addressed=event.addressed)
        if speaker is None or not heard:
            self._drop(event)
            return False
        if not self.admit(event.message_id):
            return False
        if not event.text and not event.files:
            self._drop(event)
            return False
        self.submit(event, speaker)
        return True

    def admit(self, message_id: str) -> bool:
        """True the first time ``message_id`` is seen; a replay or duplicate is refused.
        (An adapter that must act before :meth:`submit`, like opening a thread, calls it.)"""
        if self.pipeline.admit(message_id):
            return True
        log_event("channel_duplicate", frontend=self.app.name, message_id=message_id)
        return False

    def submit(self, event: InboundEvent, speaker: Speaker) -> None:
        """Queue an admitted event from a heard speaker for its session's next turn."""
        log_event(
            "channel_message",
            frontend=self.app.name,
            session=event.session_id,
            message_id=event.message_id,
        )
        job = Job(event, speaker)
        self.pipeline.submit(Incoming(event.message_id, event.session_id, event.author_id, job))

    def _drop(self, event: InboundEvent) -> None:
        if self.receipts is not None:
            self.receipts.dropped(event)

    async def resume(self, ledger: ChannelLedger) -> int:
        """Answer the turns a dead process committed but never answered, each as a task of
        its own (cancelled by :meth:`aclose`); how many were started."""
        started = 0
        for turn in await ledger.unanswered():
            first = turn.events[0]
            speaker = self.access.speaker(first.author_id, is_bot=first.author_is_bot)
            if speaker is None:  # no longer allowed: nothing to answer
                await ledger.answered(turn.event_ids)
                continue
            for event_id in turn.event_ids:
                self.pipeline.admit(event_id)
            log_event("channel_resume", frontend=self.app.name, session=first.session_id,
                      message_id=turn.message_id, events=len(turn.events))  # fmt: skip
            task = asyncio.get_running_loop().create_task(
                self._resumed_turn(turn.events, speaker, turn.message_id),
                name=f"channel-resume-{turn.message_id}",
            )
            self._resumed.add(task)
            task.add_done_callback(self._resumed.discard)
            started += 1
        return started

    async def _resumed_turn(
        self, events: Sequence[InboundEvent], speaker: Speaker, message_id: int
    ) -> None:
        try:
            await self.run_turn(events, speaker, stored_id=message_id)
        except Exception as e:  # as the pipeline does for a turn: logged, never lost silently
            self._log_failure(events[0].session_id, e, "resumed turn crashed")

    # ---- one turn ----------------------------------------------------------------------

    async def run_batch(self, batch: Batch) -> None:
        """Run one turn for a burst of messages and render it."""
        jobs: list[Job] = [item.payload for item in batch.items]
        await self.run_turn([j.event for j in jobs], jobs[0].speaker)

    async def run_turn(
        self, events: Sequence[InboundEvent], speaker: Speaker, *, stored_id: int | None = None
    ) -> None:
        """One turn for ``events`` (one author, one session); ``stored_id`` when their message
        was committed by a process that died before answering it."""
        first = events[0]
        conversation = first.conversation
        stream = ReplyStream(self.app, conversation)
        typing = asyncio.get_running_loop().create_task(self.keep_typing(conversation))
        try:  # typing shows from the first download on
            inbound = await self.inbound(events, speaker, stored_id)
            async for event in self.agent.run_turn(inbound):
                await stream.feed(event)
        except LunaError as e:
            self._log_failure(first.session_id, e, "turn failed")
            stream.fail(short_line(str(e)) or GENERIC_FAILURE)
        except Exception as e:  # a code bug: the log gets the traceback
            self._log_failure(first.session_id, e, "turn crashed")
            stream.fail(GENERIC_FAILURE)
        finally:
            typing.cancel()
            await asyncio.gather(typing, return_exceptions=True)
        await stream.finish()
        if self.receipts is not None:  # what could be sent was: a resumed turn would fail alike
            await self.receipts.answered(events)

    async def inbound(
        self, events: Sequence[InboundEvent], speaker: Speaker, stored_id: int | None
    ) -> InboundMessage:
        """The agent's message for a burst: its texts, and its files taken by the intake."""
        first = events[0]
        conversation = first.conversation
        files = [f for e in events for f in e.files]
        if has_voice(files):
            await send_text(self.app, conversation, VOICE_NOTICE, "notice")
        text = "\n".join(e.text for e in events if e.text)
        attachments: tuple[Attachment, ...] = ()
        if files:
            if self.intake is None:
                got = not_taken(files)
            else:
                uploads = uploads_of(files, self.app.name, self.settings.max_attachment_bytes)
                got = await self.intake.take_all(uploads, text)
            text, attachments = got.message_text(text), tuple(got.attachments)
            if got.refusals:
                await send_text(self.app, conversation, refusal_notice(got.refusals), "notice")
        approver = None
        if speaker.allow_tools:
            approver = ChannelApprover(
                self.app, conversation, self.approvals, self.settings.approval_timeout
            )
        receipts = self.receipts

        async def on_stored(message_id: int) -> None:
            if receipts is not None:
                await receipts.stored(events, message_id)

        return InboundMessage(
            session_id=first.session_id,
            text=text,
            frontend=self.app.name,
            user_id=speaker.user_id,
            scope=speaker.scope,
            allow_tools=speaker.allow_tools,
            approver=approver,
            address=dict(first.address) or None,
            attachments=attachments,
            on_stored=on_stored,
            stored_id=stored_id,
        )

    def _log_failure(self, session_id: str, error: Exception, what: str) -> None:
        log.exception("%s: %s in %s", self.app.name, what, session_id)
        log_event("channel_error", frontend=self.app.name, op="turn", session=session_id,
                  error=type(error).__name__)  # fmt: skip

    async def keep_typing(self, conversation: object) -> None:
        """Show the typing indicator until cancelled."""
        if self.app.typing_every <= 0:
            return
        while True:
            await attempt(
                self.app.name, "typing", lambda: self.app.typing(conversation),
                patience=LIVE_PATIENCE,
            )  # fmt: skip
            await asyncio.sleep(self.app.typing_every)

    async def aclose(self) -> None:
        """Cancel resumed turns still running, then the pipeline's."""
        for task in list(self._resumed):
            task.cancel()
        await asyncio.gather(*self._resumed, return_exceptions=True)
        await self.pipeline.aclose()
