"""The Matrix front-end: connect, sync, route each message to a turn, stream the answer back.

Job: :class:`MatrixFrontend` keeps the front-end contract (``luna.frontends``): ``run(stop)``
logs in (``connection``), syncs (``sync``), and for each message that ``routing`` accepts runs
``agent.run_turn`` with typing shown and the answer streamed (``reply``). Invites are accepted
from the owner and allowed users, declined for anyone else. Reactions and replies to an
approval prompt go to ``approval`` first.

Invariants:
- Nothing raised while handling one message stops the front-end: a failed turn shows one
  short line and logs the traceback; CancelledError propagates.
- Messages of one session run in arrival order (the agent's session lock, taken in order);
  every turn task is tracked and cancelled at close.
- On stop: sync stops first (no new turns), running turns finish within
  ``agent.shutdown_grace`` (``agent.drain``), then the connection closes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from mautrix.errors import MatrixRequestError
from mautrix.types import EventID, RoomID

from luna.config import Config
from luna.errors import ConfigError, LunaError, MatrixError
from luna.frontends.matrix import intake, routing
from luna.frontends.matrix.approval import Approvals
from luna.frontends.matrix.connection import TRUST, Connection, connect
from luna.frontends.matrix.events import Reaction, RoomMessage
from luna.frontends.matrix.outbox import Outbox
from luna.frontends.matrix.reply import ReplyStream
from luna.frontends.matrix.sync import SyncLoop
from luna.frontends.matrix.sync_token import SyncTokens
from luna.messages import InboundMessage
from luna.observe import log_event

log = logging.getLogger(__name__)

TYPING_EVERY = 20.0  # the typing notice is sent with a 30 s timeout
GENERIC_FAILURE = "Something went wrong on my side; the details are in the log."
MAX_KNOWN = 4096  # Luna's own event ids and threads remembered for replies and threads


def check(cfg: Config, mode: str = "auto") -> None:
    m = cfg.matrix
    if not m.homeserver.startswith(("https://", "http://")):
        raise ConfigError("matrix.homeserver must be an http(s):// URL")
    if not (m.access_token or m.password):
        raise ConfigError("Matrix needs MATRIX_ACCESS_TOKEN or MATRIX_PASSWORD in the environment")
    if not m.owner:
        raise ConfigError("matrix.owner must be set (the Matrix user id whose approvals count)")


def make(parts: Any, args: Any) -> MatrixFrontend:
    return MatrixFrontend(parts.cfg, parts.agent, SyncTokens(parts.memory.store))


class MatrixFrontend:
    name = "matrix"

    def __init__(self, cfg: Config, agent: Any, tokens: SyncTokens) -> None:
        self.cfg = cfg
        self.agent = agent
        self.tokens = tokens
        self.conn: Connection | None = None
        self.outbox: Outbox | None = None
        self.approvals = Approvals(cfg.matrix.owner, cfg.tools.approval_timeout)
        self.own_events: dict[str, None] = {}  # Luna's events (replies to them are for her)
        self.threads: dict[str, None] = {}  # thread roots Luna answers in
        self.direct: dict[str, bool] = {}
        self.turns: set[asyncio.Task[None]] = set()
        self.ready = asyncio.Event()  # logged in and syncing (tests wait for it)
        self.sync: SyncLoop | None = None

    async def run(self, stop: asyncio.Event) -> None:
        m = self.cfg.matrix
        self.conn = await connect(m, self.cfg.data_dir)
        self.outbox = Outbox(self.conn.client, m.homeserver, m.request_timeout)
        self.sync = SyncLoop(
            self.conn,
            self.tokens,
            self.deliver,
            self.on_invite,
            min_trust=TRUST[m.trust],
            request_timeout=m.request_timeout,
        )
        log_event("matrix_ready", user_id=self.conn.user_id, device_id=self.conn.device_id)
        self.ready.set()
        syncing = asyncio.create_task(self.sync.run(stop), name="matrix-sync")
        stopper = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({syncing, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopper.cancel()
            syncing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await syncing
            await self.agent.drain(self.cfg.agent.shutdown_grace)
            for task in self.turns:
                task.cancel()
            await asyncio.gather(*self.turns, return_exceptions=True)
            await self.outbox.close()
            await self.conn.close()
        if syncing.done() and not syncing.cancelled() and syncing.exception() is not None:
            error = syncing.exception()
            raise LunaError(f"the Matrix sync stopped: {error}") from error

    # ---- events in ----------------------------------------------------------------------

    async def on_invite(self, room_id: str, inviter: str) -> None:
        client = self._conn().client
        accept = routing.may_invite(inviter, self.cfg.matrix)
        log_event("matrix_invite", room=room_id, inviter=inviter, accepted=accept)
        try:
            if accept:
                await client.join_room_by_id(RoomID(room_id))
            else:
                await client.leave_room(RoomID(room_id), reason="Luna only joins her owner's rooms")
        except MatrixRequestError as e:
            log_event("matrix_error", op="invite", error=type(e).__name__)

    async def deliver(self, item: RoomMessage | Reaction) -> None:
        if isinstance(item, Reaction):
            self.approvals.answer(item.sender, item.target, item.key)
            return
        if item.reply_to and self.approvals.answer(item.sender, item.reply_to, item.text):
            return
        facts = routing.RoomFacts(
            is_direct=await self._is_direct(item.room_id),
            replies_to_bot=await self._is_own(item.room_id, item.reply_to),
            known_thread=item.thread_root in self.threads
            or await self._is_own(item.room_id, item.thread_root),
        )
        route = routing.decide(item, facts, self.cfg.matrix)
        if route is None:
            return
        if route.thread_root:
            _remember(self.threads, route.thread_root)
        log_event("matrix_message", session=route.session_id, event_id=item.event_id)
        task = asyncio.get_running_loop().create_task(self.run_turn(item, route))
        self.turns.add(task)
        task.add_done_callback(self.turns.discard)

    async def _is_own(self, room_id: str, event_id: str | None) -> bool:
        """Whether ``event_id`` is Luna's (remembered, else asked of the homeserver)."""
        if event_id is None:
            return False
        if event_id in self.own_events:
            return True
        client = self._conn().client
        try:
            event = await client.get_event(RoomID(room_id), EventID(event_id))
        except MatrixRequestError:
            return False
        if event.sender == client.mxid:
            _remember(self.own_events, event_id)
            return True
        return False

    async def _is_direct(self, room_id: str) -> bool:
        if room_id not in self.direct:
            members = await self._conn().client.get_joined_members(RoomID(room_id))
            self.direct[room_id] = len(members) <= 2
        return self.direct[room_id]

    # ---- one turn -----------------------------------------------------------------------

    async def run_turn(self, msg: RoomMessage, route: routing.Route) -> None:
        conn, outbox, m = self._conn(), self._outbox(), self.cfg.matrix
        text = msg.text
        if msg.files:
            files = await intake.files_text(
                outbox.http, str(conn.client.api.token), msg.files, m.max_attachment_bytes
            )
            text = f"{text}\n\n{files}" if text else files
        stream = ReplyStream(
            outbox,
            msg.room_id,
            thread_root=route.thread_root,
            reply_to=route.reply_to,
            edit_interval=m.edit_interval,
        )

        async def send(content: dict[str, Any]) -> str:
            return await outbox.send(msg.room_id, "m.room.message", content)

        inbound = InboundMessage(
            session_id=route.session_id,
            text=text,
            frontend="matrix",
            user_id=route.user_id,
            scope=route.scope,
            approver=self.approvals.approver(send),
            address={"room_id": msg.room_id, "thread_root": route.thread_root},
        )
        typing = asyncio.get_running_loop().create_task(self.keep_typing(msg.room_id))
        try:
            async for event in self.agent.run_turn(inbound):
                await stream.feed(event)
        except LunaError as e:
            log.exception("matrix: turn failed in %s", route.session_id)
            log_event("matrix_error", op="turn", session=route.session_id, error=type(e).__name__)
            stream.fail(str(e).splitlines()[0][:300] if str(e) else GENERIC_FAILURE)
        except Exception as e:  # a code bug: the log gets the traceback
            log.exception("matrix: turn crashed in %s", route.session_id)
            log_event("matrix_error", op="turn", session=route.session_id, error=type(e).__name__)
            stream.fail(GENERIC_FAILURE)
        finally:
            typing.cancel()
            await asyncio.gather(typing, return_exceptions=True)
        await stream.finish()
        await outbox.typing(msg.room_id, False)
        for event_id in stream.sent_ids:
            _remember(self.own_events, event_id)

    async def keep_typing(self, room_id: str) -> None:
        while True:
            await self._outbox().typing(room_id, True)
            await asyncio.sleep(TYPING_EVERY)

    def _conn(self) -> Connection:
        if self.conn is None:
            raise MatrixError("the Matrix front-end is not connected")
        return self.conn

    def _outbox(self) -> Outbox:
        if self.outbox is None:
            raise MatrixError("the Matrix front-end is not connected")
        return self.outbox


def _remember(known: dict[str, None], key: str) -> None:
    known[key] = None
    while len(known) > MAX_KNOWN:
        known.pop(next(iter(known)))
