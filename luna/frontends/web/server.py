"""The web front-end's server: the aiohttp application, its routes, and its run(stop) life.

Why aiohttp: it is already installed (discord.py depends on it), so the web front-end adds no
dependency; its ``AppRunner``/``TCPSite`` serve on the event loop Luna already runs, next to the
REPL or the Discord bot, without owning the loop or the signals (uvicorn wants both, and
Starlette would add two packages for the same features); and it streams responses (SSE)
natively. The page is plain static files: no build step.

Invariants:
- ``check(cfg)`` refuses to start without a usable ``LUNA_WEB_TOKEN`` and says how to set one,
  and with a webhook that cannot work (``luna.hooks.rules``: its secret, its target).
- It listens on ``web.host`` (127.0.0.1 unless configured) and prints one line with its URL,
  and one warning when that is reachable beyond this machine without TLS in front (the rule
  ``luna doctor`` applies, ``luna.doctor.web.exposure``).
- ``run(stop)``: once ``stop`` is set it takes no new turns (nor webhook events), denies
  pending approvals, lets running turns finish within ``agent.shutdown_grace`` (the agent's
  drain), ends the event streams, then closes the listener.
- A port it cannot bind stops Luna with one line (LunaError), not a traceback.
- A connection that has not sent a whole request head within ``web.header_timeout`` seconds
  (of opening, or of its last answer) is closed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from pathlib import Path

from aiohttp import web

from luna.config import Config
from luna.doctor.web import exposure
from luna.errors import ConfigError, LunaError
from luna.frontends import Components
from luna.frontends.web import (
    admin_api,
    hooks_api,
    luna_api,
    openai_api,
    schedules_api,
    skills_api,
)
from luna.frontends.web.approvals import ApprovalBroker
from luna.frontends.web.auth import (
    HOW_TO_SET,
    Guard,
    add_security_headers,
    guard_middleware,
    login_handler,
    logout_handler,
    token_problem,
)
from luna.frontends.web.events import EventHub
from luna.frontends.web.hooks_api import HookDoor
from luna.frontends.web.state import STATE, WebState
from luna.frontends.web.turns import TurnRunner
from luna.hooks.rules import hook_problems, scheduler_problem
from luna.hooks.store import HookStore
from luna.hooks.worker import HookWorker
from luna.observe import log_event

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).parent / "static"
MAX_BODY_BYTES = 4 * 1024 * 1024
CLOSE_TIMEOUT_S = 5.0


def check(cfg: Config, mode: str = "auto") -> None:
    """Refuse to start without a token worth the name. Turning the page off is a way out only
    when ``web.enabled`` added it; ``luna web`` asked for it by name."""
    problem = token_problem(cfg.web.token)
    if problem:
        way_out = "" if mode == "web" else ", or set web.enabled = false"
        raise ConfigError(f"web: {problem}; {HOW_TO_SET}{way_out}")
    hooks = scheduler_problem(cfg)
    if hooks is not None:
        raise ConfigError(f"web: {hooks.text}; {hooks.fix}")
    for name, hook in cfg.hooks.items():
        for p in hook_problems(cfg, name, hook):
            if p.essential:
                raise ConfigError(f"web: hook {name}: {p.text}; {p.fix}")


async def index(request: web.Request) -> web.FileResponse:
    return web.FileResponse(STATIC_DIR / "index.html")


def build_app(st: WebState) -> web.Application:
    """The aiohttp application over the running parts in ``st``."""
    # A JSON body may carry one file of attachments.max_bytes as a base64 data: URL (the
    # OpenAI API's image_url); the page's files come as multipart parts, read as a stream.
    body_cap = MAX_BODY_BYTES + st.cfg.attachments.max_bytes * 4 // 3
    app = web.Application(middlewares=[guard_middleware(st.guard)], client_max_size=body_cap)
    app[STATE] = st
    app.on_response_prepare.append(add_security_headers)
    app.add_routes(
        [
            web.get("/", index),
            web.post("/login", login_handler(st.guard)),
            web.post("/api/logout", logout_handler(st.guard)),
            *openai_api.routes(),
            *luna_api.routes(),
            *admin_api.routes(),
            *schedules_api.routes(),
            *skills_api.routes(),
            *hooks_api.routes(),
            web.static("/static", STATIC_DIR, show_index=False, follow_symlinks=False),
        ]
    )
    return app


class WebFrontend:
    """The page, the OpenAI-compatible API and Luna's JSON API, on one listener."""

    name = "web"

    def __init__(self, parts: Components, *, announce: bool = True) -> None:
        cfg = parts.cfg
        self.cfg = cfg
        self.agent = parts.agent
        self.announce = announce
        hub = EventHub()
        broker = ApprovalBroker(cfg.tools.approval_timeout, hub.publish)
        runner = TurnRunner(parts.agent, parts.memory, hub, broker)
        self.state = WebState(
            cfg=cfg,
            agent=parts.agent,
            memory=parts.memory,
            registry=parts.registry,
            guard=Guard(
                cfg.web.token, cfg.web.trusted_proxies, failure_delay=cfg.web.failure_delay
            ),
            hub=hub,
            broker=broker,
            runner=runner,
            scheduler=getattr(parts, "scheduler", None),
            intake=getattr(parts, "intake", None),
        )
        self.hook_worker: HookWorker | None = None
        if cfg.hooks:
            store = HookStore(parts.memory.store)
            router = self.state.scheduler.router if self.state.scheduler is not None else None
            self.hook_worker = HookWorker(cfg, parts.agent, parts.registry, store, router)
            self.state.hooks = HookDoor(cfg, store, self.hook_worker, self.state.guard.peers)
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> str:
        """Listen; returns the URL (with the real port when ``web.port`` is 0)."""
        # aiohttp's keep-alive timer starts when a connection opens and again when an answer
        # ends, and closes the connection if no complete request head has arrived by then:
        # set to web.header_timeout it is the header timeout (it never cuts a running answer).
        self._runner = web.AppRunner(
            build_app(self.state),
            access_log=None,
            shutdown_timeout=CLOSE_TIMEOUT_S,
            keepalive_timeout=self.cfg.web.header_timeout,
        )
        await self._runner.setup()
        if self.hook_worker is not None:  # events a stopped process left: before new ones
            await self.hook_worker.start()
        site = web.TCPSite(self._runner, self.cfg.web.host, self.cfg.web.port)
        try:
            await site.start()
        except OSError as e:
            await self._runner.cleanup()
            if self.hook_worker is not None:
                self.hook_worker.stop()
                await self.hook_worker.wait(CLOSE_TIMEOUT_S)
            raise LunaError(
                f"web: cannot listen on {self.cfg.web.host}:{self.cfg.web.port} "
                f"({e.strerror or e}); choose another web.port or stop what uses it"
            ) from e
        port = self._runner.addresses[0][1] if self._runner.addresses else self.cfg.web.port
        host = self.cfg.web.host
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}"
        if self.state.scheduler is not None:  # scheduled results for the web: held ones now
            self.state.scheduler.router.register("web", schedules_api.delivery_sink(self.state.hub))
        if self.announce:
            print(
                f"web: Luna's page and API at {self.url}/ (token: $LUNA_WEB_TOKEN)", file=sys.stderr
            )
        problem = exposure(self.cfg.web)
        if problem is not None:
            log_event("web_exposed", host=self.cfg.web.host, port=port)
            if self.announce:
                print(
                    f'web: warning: {problem}; keep web.host = "127.0.0.1" behind a TLS '
                    "reverse proxy (README: On the LAN)",
                    file=sys.stderr,
                )
        return self.url

    async def run(self, stop: asyncio.Event) -> None:
        await self.start()
        try:
            await stop.wait()
        finally:
            await self.close()

    async def close(self) -> None:
        """Stop taking turns, let running ones end (the agent drains them), then close."""
        st = self.state
        if st.scheduler is not None:
            st.scheduler.router.unregister("web")
        st.runner.stop()
        st.broker.deny_all()
        deadline = self.cfg.agent.shutdown_grace + CLOSE_TIMEOUT_S
        if self.hook_worker is not None:
            self.hook_worker.stop()
            await asyncio.gather(st.runner.wait(deadline), self.hook_worker.wait(deadline))
        else:
            await st.runner.wait(deadline)
        st.hub.close()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            with contextlib.suppress(Exception):
                await asyncio.wait_for(runner.cleanup(), CLOSE_TIMEOUT_S * 2)


def make(parts: Components, args: argparse.Namespace) -> WebFrontend:
    return WebFrontend(parts)
