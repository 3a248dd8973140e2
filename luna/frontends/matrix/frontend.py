"""Luna's Matrix front-end: the bot's connection and sync around the channel layer.

Job: :class:`MatrixFrontend` keeps the front-end contract (``luna.frontends``): ``run(stop)``
logs in (``connection``), has the bot's device signed by its own cross-signing keys
(``crosssign``), syncs (``sync``), hands each room message to the channel layer as
an ``InboundEvent`` (``inbound``) and each answer to an approval prompt (a reaction or a
reply from the owner) to the layer's approvals; the layer's calls come back through the
:class:`~luna.frontends.matrix.adapter.MatrixAdapter`. Invites are accepted from the owner
and allowed users, declined for anyone else. Scheduled results are delivered while it runs.

Invariants:
- Who is heard, bursts, one turn per session, streaming, splitting and approvals are the
  channel layer's; this module translates and keeps the connection.
- The owner is one person across apps: ``matrix.owner`` has memory scope ``owner``; an
  allowed user keeps scope ``user:<mxid>`` (ids need no app prefix: a Matrix id names its
  server).
- The sync token is saved once what its batch brought is settled (``settle``): a message
  still in a burst or queued behind its session's running turn when Luna stops is synced
  again at the next start. A message whose turn's user message was committed is on the
  channel ledger first (``ChannelLedger.stored``), and one on the ledger that a later start
  syncs again is skipped; a turn on the ledger but never answered (Luna stopped or died
  during it) is answered at the next start, before the sync, in its room and thread
  (``Channel.resume``). Each is answered once.
- Nothing raised while handling one event stops the front-end (logged, the sync goes on);
  CancelledError propagates.
- On stop: sync stops first (no new turns), running turns finish within
  ``agent.shutdown_grace`` (``agent.drain``), then the layer and the connection close.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from mautrix.errors import MatrixRequestError
from mautrix.types import RoomID

from luna.config import Config
from luna.errors import ConfigError, LunaError, MatrixError
from luna.frontends.channels.access import Access
from luna.frontends.channels.channel import Channel, ChannelSettings
from luna.frontends.channels.contract import InboundEvent
from luna.frontends.channels.cursor import ChannelLedger
from luna.frontends.channels.delivery import ScheduledDelivery
from luna.frontends.channels.following import Following
from luna.frontends.channels.sending import LIVE_PATIENCE, attempt
from luna.frontends.matrix.adapter import MatrixAdapter, verdict
from luna.frontends.matrix.connection import TRUST, Connection, connect
from luna.frontends.matrix.crosssign import cross_sign
from luna.frontends.matrix.events import Reaction, RoomMessage
from luna.frontends.matrix.inbound import CODEC, Inbound
from luna.frontends.matrix.outbox import Outbox
from luna.frontends.matrix.settle import TokenKeeper
from luna.frontends.matrix.sync import SyncLoop
from luna.observe import log_event

if TYPE_CHECKING:
    from luna.agent import Agent
    from luna.attachments.intake import Intake
    from luna.frontends import Components
    from luna.memory import Memory
    from luna.scheduler.delivery import DeliveryRouter

log = logging.getLogger(__name__)


def check(cfg: Config, mode: str = "auto") -> None:
    m = cfg.matrix
    if not m.homeserver.startswith(("https://", "http://")):
        raise ConfigError("matrix.homeserver must be an http(s):// URL")
    if not (m.access_token or m.password):
        raise ConfigError("Matrix needs MATRIX_ACCESS_TOKEN or MATRIX_PASSWORD in the environment")
    if not m.owner:
        raise ConfigError("matrix.owner must be set (the Matrix user id whose approvals count)")


def access_of(cfg: Config) -> Access:
    m = cfg.matrix
    return Access.of([m.owner], m.allowed_users, strangers_can_chat=False, id_prefix="")


class Receipts:
    """The layer's receipts: each event's fate settles it for the sync token (``settle``),
    a committed one put on the ledger first; a turn's reply written, its turn is marked
    answered and its room's typing notice goes."""

    def __init__(self, adapter: MatrixAdapter, keeper: TokenKeeper, ledger: ChannelLedger) -> None:
        self.adapter = adapter
        self.keeper = keeper
        self.ledger = ledger

    def dropped(self, event: InboundEvent) -> None:
        self.keeper.settle([event.message_id])

    async def stored(self, events: Sequence[InboundEvent], message_id: int) -> None:
        try:  # on record before the token may pass their batch
            await self.ledger.stored(None, message_id, events)
        finally:  # a failed record must not hold the token back: at worst, answered twice
            self.keeper.settle(e.message_id for e in events)
            await self.keeper.flush()

    async def answered(self, events: Sequence[InboundEvent]) -> None:
        self.keeper.settle(e.message_id for e in events)  # a turn that never stored its message
        await self.keeper.flush()
        await self.ledger.answered([e.message_id for e in events])
        room = events[0].conversation
        await attempt("matrix", "typing", lambda: self.adapter.stop_typing(room),
                      patience=LIVE_PATIENCE)  # fmt: skip


def make(parts: Components, args: argparse.Namespace) -> MatrixFrontend:
    deliveries = parts.scheduler.router if parts.scheduler is not None else None
    return MatrixFrontend(parts.cfg, parts.agent, parts.memory, parts.intake, deliveries)


class MatrixFrontend:
    name = "matrix"

    def __init__(
        self,
        cfg: Config,
        agent: Agent,
        memory: Memory,
        intake: Intake | None,  # None: files are refused
        deliveries: DeliveryRouter | None = None,
    ) -> None:
        self.cfg = cfg
        self.agent = agent
        self.intake = intake
        self.memory = memory
        self.deliveries = deliveries
        self.access = access_of(cfg)
        self.conn: Connection | None = None
        self.outbox: Outbox | None = None
        self.adapter: MatrixAdapter | None = None
        self.inbound: Inbound | None = None
        self.channel: Channel | None = None
        self.ready = asyncio.Event()  # logged in and syncing (tests wait for it)
        self.sync: SyncLoop | None = None
        self.keeper: TokenKeeper | None = None
        self.ledger: ChannelLedger | None = None

    async def run(self, stop: asyncio.Event) -> None:
        m = self.cfg.matrix
        self.conn = conn = await connect(m, self.cfg.data_dir)
        await cross_sign(conn.crypto, conn.db, deadline=4 * m.request_timeout)
        self.outbox = Outbox(conn.client, m.homeserver, m.request_timeout)
        self.adapter = MatrixAdapter(conn.client, self.outbox, edit_interval=m.edit_interval)
        following = Following(self.memory.store)
        self.inbound = Inbound(conn.client, self.adapter.own_events, following, self.outbox.http,
                               m.max_attachment_bytes)  # fmt: skip
        settings = ChannelSettings(
            burst_window=m.burst_window,
            max_attachment_bytes=m.max_attachment_bytes,
            approval_timeout=self.cfg.tools.approval_timeout,
        )
        self.ledger = ledger = ChannelLedger(self.memory.store, "matrix", conn.user_id, CODEC)
        self.keeper = TokenKeeper(ledger, max_hold=2 * self.cfg.agent.turn_timeout)
        self.channel = Channel(
            self.adapter,
            self.agent,
            self.access,
            settings,
            Receipts(self.adapter, self.keeper, ledger),
            intake=self.intake,
        )
        self.sync = SyncLoop(
            conn,
            self.keeper,
            self.deliver,
            self.on_invite,
            min_trust=TRUST[m.trust],
            request_timeout=m.request_timeout,
        )
        if self.deliveries is not None:
            self.deliveries.register("matrix", ScheduledDelivery(self.adapter))
        await self.channel.resume(ledger)  # before the sync, which may bring their events again
        log_event("matrix_ready", user_id=conn.user_id, device_id=conn.device_id)
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
            await self._close()
        if syncing.done() and not syncing.cancelled() and syncing.exception() is not None:
            error = syncing.exception()
            raise LunaError(f"the Matrix sync stopped: {error}") from error

    async def _close(self) -> None:
        if self.deliveries is not None:
            self.deliveries.unregister("matrix")
        await self.agent.drain(self.cfg.agent.shutdown_grace)
        if self.channel is not None:
            await self.channel.aclose()
        if self.outbox is not None:
            await self.outbox.close()
        if self.conn is not None:
            await self.conn.close()

    # ---- events in ----------------------------------------------------------------------

    async def on_invite(self, room_id: str, inviter: str) -> None:
        client = self._conn().client
        accept = self.access.speaker(inviter) is not None
        log_event("matrix_invite", room=room_id, inviter=inviter, accepted=accept)
        try:
            if accept:
                await client.join_room_by_id(RoomID(room_id))
            else:
                await client.leave_room(RoomID(room_id), reason="Luna only joins her owner's rooms")
        except MatrixRequestError as e:
            log_event("matrix_error", op="invite", error=type(e).__name__)

    async def deliver(self, item: RoomMessage | Reaction) -> None:
        """One message or reaction from the sync (never raises but CancelledError)."""
        channel, inbound, ledger = self.channel, self.inbound, self.ledger
        if channel is None or inbound is None or ledger is None:
            raise MatrixError("the Matrix front-end is not connected")
        try:
            if isinstance(item, Reaction):
                allow = verdict(item.key)
                if allow is not None:
                    channel.approvals.answer(item.target, item.sender, allow)
                return
            allow = verdict(item.text) if item.reply_to else None
            if item.reply_to and allow is not None:
                if channel.approvals.answer(item.reply_to, item.sender, allow) != "unknown":
                    return  # an answer to a prompt, never a message to the model
            if await ledger.has(item.event_id):  # synced again after a restart: one turn
                log_event("matrix_taken_before", event_id=item.event_id)
                return
            event = await inbound.event_of(item)
            if channel.receive(event):
                self._keeper().hold(event.message_id)  # the token waits until it settles
                if item.thread_root is not None:
                    inbound.following.follow(event.session_id)
        except Exception as e:  # one bad event must not stop the sync (the log has why)
            log.exception("matrix: handling %s failed", item.event_id)
            log_event("channel_error", frontend="matrix", op="event", error=type(e).__name__)

    def _keeper(self) -> TokenKeeper:
        if self.keeper is None:
            raise MatrixError("the Matrix front-end is not connected")
        return self.keeper

    def _conn(self) -> Connection:
        if self.conn is None:
            raise MatrixError("the Matrix front-end is not connected")
        return self.conn
