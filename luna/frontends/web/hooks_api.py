"""Webhooks over HTTP: ``POST /hooks/NAME``, an event signed by another program, run as a turn.

Job: :class:`HookDoor` checks a request against its hook (``luna.hooks.signing``), stores the
event (``luna.hooks.store``) and hands it to the :class:`~luna.hooks.worker.HookWorker`.

Invariants:
- ``/hooks/`` needs no ``LUNA_WEB_TOKEN`` (``auth`` lets it through): each hook's own secret
  guards it, and a request opens nothing else.
- Checked in this order, each refusal one short JSON error and no turn: an unknown hook
  (404); Luna stopping (503); too many bad signatures from this source (429, the bucket
  taken before the body is read); a body over the hook's ``max_body_bytes`` (413, a declared
  length refused unread); missing or wrong signature headers, a wrong signature or a stale
  timestamp (401, slowed); a body that is not JSON (400); the hook's ``per_minute`` spent
  (429); a signature already accepted, a replay (409, its event given back).
- The signature is checked before the body is parsed, and the hook's own bucket is taken
  only by correctly signed events: nobody without the secret can spend a hook's events.
- 202 comes only after the event is committed durably (fsync): an acknowledged event
  survives ``kill -9`` and is run by the next start if this process dies first.
- The body is never logged; the log gets the hook's name, the event id and the outcome.
"""

from __future__ import annotations

import asyncio
import datetime as dt

from aiohttp import web

from luna.config import Config
from luna.config.hooks import HookConfig, session_of
from luna.errors import DatabaseBusyError
from luna.frontends.web.inputs import ApiError, capped_body, error, parse_json
from luna.frontends.web.peers import Peers
from luna.frontends.web.state import state
from luna.frontends.web.throttle import Throttle
from luna.hooks.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, problem
from luna.hooks.store import HookEvent, HookStore
from luna.hooks.worker import HookWorker
from luna.observe import log_event

RATE_WINDOW_S = 60.0
BUSY_RETRY_S = 5


def _too_many(throttle: Throttle, key: str, what: str) -> web.Response:
    wait = throttle.retry_after(key)
    resp = error(429, f"{what}; try again in {wait} s")
    resp.headers["Retry-After"] = str(wait)
    return resp


class HookDoor:
    """The checks between ``POST /hooks/NAME`` and a stored event; see the module docstring."""

    def __init__(self, cfg: Config, store: HookStore, worker: HookWorker, peers: Peers) -> None:
        self.cfg = cfg
        self.store = store
        self.worker = worker
        self.peers = peers
        self.failures = Throttle()  # bad signatures per source
        self.rates = {
            name: Throttle(capacity=hook.per_minute, window_s=RATE_WINDOW_S)
            for name, hook in cfg.hooks.items()
        }

    async def receive(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        hook = self.cfg.hooks.get(name)
        if hook is None:
            return error(404, f"no hook named {name[:40]!r} here")
        if not self.worker.is_accepting:
            return error(503, "Luna is stopping; send the event again in a moment")
        source = self.peers.source(request)
        if not self.failures.take(source):  # before any await: a burst cannot all be checked
            return _too_many(self.failures, source, "too many bad signatures from your address")
        body, signature = await self._signed(request, name, hook, source)
        self.failures.refund(source)
        parse_json(body)  # 400 unless it is JSON (the event keeps the bytes as sent)
        rate = self.rates[name]
        if not rate.take("events"):
            return _too_many(rate, "events", f"hook {name} takes {hook.per_minute}/min")
        now, session, text = dt.datetime.now(dt.UTC), session_of(name, hook), body.decode()
        try:
            event_id = await asyncio.to_thread(
                self.store.accept, name, signature, text, session, now
            )
        except DatabaseBusyError:
            rate.refund("events")
            resp = error(503, "the database is busy; send the event again in a moment")
            resp.headers["Retry-After"] = str(BUSY_RETRY_S)
            return resp
        if event_id is None:
            rate.refund("events")  # nothing new was accepted
            log_event("hook_refused", hook=name, status=409, source=source)
            return error(409, "this signature was accepted before: a replay")
        self.worker.submit(HookEvent(event_id, name, text, session, now, "pending"))
        log_event("hook_accepted", hook=name, event_id=event_id, bytes=len(body))
        return web.json_response({"accepted": True, "hook": name, "event": event_id}, status=202)

    async def _signed(
        self, request: web.Request, name: str, hook: HookConfig, source: str
    ) -> tuple[bytes, str]:
        """(the body, its signature) when the hook's secret signed it just now; else
        ApiError: 413 or 408 for the body, 401 (slowed) for the signature."""
        body = await capped_body(request, hook.max_body_bytes)
        sent = request.headers.get(SIGNATURE_HEADER, "")
        stamp = request.headers.get(TIMESTAMP_HEADER)
        wrong = problem(hook.secret, stamp, sent, body, window=hook.replay_window)
        if wrong is not None:
            log_event("hook_refused", hook=name, status=401, source=source)
            await asyncio.sleep(self.cfg.web.failure_delay)
            raise ApiError(401, wrong)
        return body, sent.strip()


async def receive(request: web.Request) -> web.StreamResponse:
    """``POST /hooks/{name}``."""
    door = state(request).hooks
    if door is None:
        raise ApiError(404, "no webhooks are configured here (see README: Webhooks)")
    return await door.receive(request)


def routes() -> list[web.RouteDef]:
    return [web.post("/hooks/{name}", receive)]
