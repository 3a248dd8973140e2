"""Turns started from the web: run in the background, watched by the page and the OpenAI API.

Job: :class:`TurnRunner` starts an ``Agent.run_turn`` for a message in a tracked task and
records its events in a :class:`Turn`. The page follows every turn through the event hub; an
OpenAI client follows its own turn with :meth:`Turn.follow`.

Invariants:
- A turn does not belong to an HTTP connection: a reloaded page or a dropped API client does
  not cancel it, and its reply lands in the session log as usual (so a resent request finds it).
- Each turn ends with exactly one ``done`` or ``failed`` event, also when the agent cancelled it
  at shutdown or the code failed; the user gets one short line, the operator the traceback.
- Only sessions in the owner's memory scope are written from the web (a Discord stranger's
  session stays readable, never writable: its prompt must not receive the owner's turns).
- ``stop()`` refuses new turns; the agent's drain finishes or cancels the running ones.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import re
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from luna.frontends.web.approvals import ApprovalBroker
from luna.frontends.web.events import EventHub, event_json
from luna.messages import Attachment, InboundMessage
from luna.tasks import finish_or_cancel

if TYPE_CHECKING:  # the running parts are handed in; only their types here
    from luna.agent import Agent
    from luna.memory import Memory

log = logging.getLogger(__name__)

SESSION_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")  # fullmatch only
MAX_MESSAGE_CHARS = 200_000
CANCELLED = "That reply was cancelled (Luna is shutting down); send it again in a moment."


class TurnRefusedError(Exception):
    """A turn the web will not start; ``status`` is the HTTP status to answer with."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def new_session_id() -> str:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"web-{stamp}-{secrets.token_hex(3)}"


def valid_session_id(session_id: str) -> bool:
    return SESSION_ID_RE.fullmatch(session_id) is not None


@dataclass
class Turn:
    """One running (or finished) turn and every event it emitted so far."""

    id: str
    session_id: str
    text: str
    source: str  # "page" or "api"
    events: list[dict[str, Any]] = field(default_factory=list)
    is_finished: bool = False
    _followers: set[asyncio.Queue[dict[str, Any] | None]] = field(default_factory=set)

    def add(self, event: dict[str, Any]) -> None:
        self.events.append(event)
        for q in self._followers:
            q.put_nowait(event)

    def finish(self) -> None:
        self.is_finished = True
        for q in self._followers:
            q.put_nowait(None)

    async def follow(self) -> AsyncIterator[dict[str, Any]]:
        """Every event of the turn from its first, then live ones, until it ends."""
        q: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        for past in self.events:
            q.put_nowait(past)
        if self.is_finished:
            q.put_nowait(None)
        self._followers.add(q)
        try:
            while (event := await q.get()) is not None:
                yield event
        finally:
            self._followers.discard(q)

    def snapshot(self) -> dict[str, Any]:
        return {
            "turn_id": self.id,
            "session_id": self.session_id,
            "text": self.text,
            "events": list(self.events),
        }


class TurnRunner:
    """Starts and tracks web turns; see the module docstring."""

    def __init__(self, agent: Agent, memory: Memory, hub: EventHub, broker: ApprovalBroker) -> None:
        self.agent = agent
        self.memory = memory
        self.hub = hub
        self.broker = broker
        self.is_accepting = True
        self._running: dict[str, Turn] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    def running(self) -> list[dict[str, Any]]:
        return [t.snapshot() for t in self._running.values()]

    async def start(
        self,
        session_id: str,
        text: str,
        *,
        source: str,
        attachments: tuple[Attachment, ...] = (),
    ) -> Turn:
        """Start a turn (``attachments``: taken by the intake already); raises
        TurnRefusedError for what the web never runs."""
        if not self.is_accepting:
            raise TurnRefusedError("Luna is shutting down; send that again in a moment.", 503)
        if not valid_session_id(session_id):
            raise TurnRefusedError(
                "a session id is 1-128 letters, digits and . _ : @ - (starting with a letter "
                "or digit)",
                400,
            )
        if not text.strip() and not attachments:
            raise TurnRefusedError("the message is empty", 400)
        if len(text) > MAX_MESSAGE_CHARS:
            raise TurnRefusedError(f"the message is longer than {MAX_MESSAGE_CHARS:,} chars", 413)
        scope = await self.memory.session_scope(session_id)
        if scope != "owner":
            raise TurnRefusedError(
                f"session {session_id} belongs to memory scope {scope}; the web can read it "
                "but only writes to the owner's sessions",
                403,
            )
        turn = Turn(secrets.token_hex(6), session_id, text, source)
        msg = InboundMessage(
            session_id=session_id,
            text=text,
            frontend="web",
            user_id="owner",
            scope="owner",
            approver=self.broker.approver(session_id),
            address={"session_id": session_id},  # a task scheduled here reports back here
            attachments=attachments,
        )
        self._running[turn.id] = turn
        files = [{"name": a.name, "kind": a.kind, "size": a.size} for a in attachments]
        self._emit(turn, {"type": "turn_started", "text": text, "source": source, "files": files})
        task = asyncio.create_task(self._run(turn, msg), name=f"web-turn-{turn.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return turn

    def _emit(self, turn: Turn, event: dict[str, Any]) -> None:
        event = {**event, "session_id": turn.session_id, "turn_id": turn.id}
        turn.add(event)
        self.hub.publish(event)

    async def _run(self, turn: Turn, msg: InboundMessage) -> None:
        ended = False
        try:
            async for event in self.agent.run_turn(msg):
                data = event_json(event)
                ended = ended or data["type"] in ("done", "failed")
                self._emit(turn, data)
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # we are being cancelled ourselves; ``finally`` reports the turn
            # else the agent's drain cancelled the turn: ``finally`` reports it
        except Exception:  # one short line for the user, the traceback logged
            log.exception("web turn %s failed", turn.id)
            if not ended:
                self._emit(turn, {"type": "failed", "message": "Internal error; see the log."})
                ended = True
        finally:
            if not ended:
                self._emit(turn, {"type": "failed", "message": CANCELLED})
            turn.finish()
            self._running.pop(turn.id, None)

    def stop(self) -> None:
        """Take no new turns."""
        self.is_accepting = False

    async def wait(self, deadline: float) -> None:
        """Wait up to ``deadline`` seconds for running turns, then cancel what is left."""
        await finish_or_cancel(self._tasks, deadline)
