"""Several model servers: route each call by role, keep sessions where they started, fail over.

Roles: ``chat`` (the main loop), ``background`` (the librarian, tool-output extraction,
scheduled digests) and ``subagent``. A role with no server of its own uses the chat servers.
With no ``[[llm.servers]]`` configured, the one server at ``llm.endpoint`` has every role.

Invariants:
- A session (``lane``) keeps the server it started on while that server is healthy, so its KV
  cache stays useful; a background call goes to the first healthy server of its role.
- A server that is unreachable or fails (HTTP 5xx, timeouts: after the client's own retries)
  is left out for ``llm.failover_backoff`` seconds, doubling on each new failure up to 60
  times that, and the call goes to the next server of the role. The log (``llm_failover``)
  and ``luna doctor`` say so. When every server of a role is out, they are all tried anyway.
- A refusal of the request itself (``LLMRejectedError``, ``LLMContextOverflowError``) is not
  a server failure: it is raised as it is, for the agent to repair the request.
- A stream that already showed text to the user is never retried on another server (the user
  would see the start twice); it fails as one line.
- Nothing here ever starts the embedded demo model: a configured server is never replaced.
- Servers may differ in what they see: each client reads its own ``/props`` modalities, and
  ``can_see(lane)`` answers for the server that lane's next call goes to (a failover to a
  text-only server gets lines in place of images from its client).
- ``RoleLLM.leaves_sessions_alone`` says whether a background call can cost a session its KV
  cache: never on a server no chat session uses, else as that server's client says.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from luna.config import ROLES, LLMConfig, Role
from luna.errors import LLMContextOverflowError, LLMError, LLMRejectedError
from luna.llm.client import LLMClient
from luna.llm.contract import (
    Messages,
    ProgressCallback,
    RequestRecorder,
    TextCallback,
    ToolSpecs,
)
from luna.llm.server_info import ServerInfo
from luna.messages import LLMResponse
from luna.observe import TURN_DETAIL, log_event

log = logging.getLogger(__name__)

MAX_BACKOFF_FACTOR = 60
REQUEST_ERRORS = (LLMRejectedError, LLMContextOverflowError)


@dataclass
class Backend:
    """One server, its client and its health."""

    name: str
    client: LLMClient
    roles: tuple[str, ...]
    down_until: float = 0.0
    failures: int = 0
    last_error: str = ""

    def is_up(self, now: float) -> bool:
        return now >= self.down_until


@dataclass
class LLMRouter:
    """Every configured server; ``view(role)`` is what a part of Luna talks to."""

    cfg: LLMConfig
    backends: list[Backend]
    clock: Callable[[], float] = time.monotonic
    _sticky: dict[str, str] = field(default_factory=dict)  # lane -> backend name

    @classmethod
    def from_config(cls, cfg: LLMConfig) -> LLMRouter:
        if not cfg.servers:
            return cls.single(LLMClient(cfg))
        backends = []
        for s in cfg.servers:
            update = {"endpoint": s.endpoint, "model": s.model or cfg.model, "api_key": s.api_key}
            backends.append(
                Backend(s.name, LLMClient(cfg.model_copy(update=update)), tuple(s.roles))
            )
        return cls(cfg, backends)

    @classmethod
    def single(cls, client: LLMClient) -> LLMRouter:
        return cls(client.cfg, [Backend("default", client, ROLES)])

    def view(self, role: Role) -> RoleLLM:
        return RoleLLM(self, role)

    async def close(self) -> None:
        for b in self.backends:
            await b.client.close()

    def status(self) -> list[dict[str, Any]]:
        now = self.clock()
        return [
            {
                "name": b.name,
                "endpoint": b.client.endpoint,
                "roles": list(b.roles),
                "up": b.is_up(now),
                "out_for_s": round(max(0.0, b.down_until - now), 1),
                "failures": b.failures,
                "vision": b.client.known_info.has_vision if b.client.known_info else None,
                "last_error": b.last_error,
            }
            for b in self.backends
        ]

    # ---- choosing ----------------------------------------------------------------------

    def candidates(self, role: str, lane: str | None) -> list[Backend]:
        """The servers to try for one call, best first."""
        own = [b for b in self.backends if role in b.roles]
        pool = own or [b for b in self.backends if "chat" in b.roles] or self.backends
        now = self.clock()
        up = [b for b in pool if b.is_up(now)]
        down = sorted((b for b in pool if not b.is_up(now)), key=lambda b: b.down_until)
        ordered = up + down  # when all are out, try them anyway, soonest back first
        sticky = self._sticky.get(lane) if lane else None
        if sticky is not None:
            ordered.sort(key=lambda b: not (b.name == sticky and b.is_up(now)))
        return ordered

    def succeeded(self, backend: Backend, lane: str | None) -> None:
        if backend.failures:
            log_event("llm_failover", server=backend.name, status="back")
        backend.failures, backend.down_until = 0, 0.0
        if lane:
            self._sticky[lane] = backend.name

    def failed(self, backend: Backend, role: str, error: LLMError) -> None:
        backend.failures += 1
        delay = min(
            self.cfg.failover_backoff * 2 ** (backend.failures - 1),
            self.cfg.failover_backoff * MAX_BACKOFF_FACTOR,
        )
        backend.down_until = self.clock() + delay
        backend.last_error = str(error)[:300]
        log.warning(
            "LLM server %s failed (%s); left out for %.0f s",
            backend.name,
            error,
            delay,
            extra=TURN_DETAIL,
        )
        log_event(
            "llm_failover",
            server=backend.name,
            role=role,
            status="down",
            backoff_s=delay,
            error=backend.last_error,
        )


class RoleLLM:
    """The LLM as one role sees it: LLMClient's calls, routed and failed over."""

    def __init__(self, router: LLMRouter, role: Role) -> None:
        self.router = router
        self.role = role

    # What callers read off a client: the preferred server's.
    @property
    def primary(self) -> LLMClient:
        return self.router.candidates(self.role, None)[0].client

    @property
    def cfg(self) -> LLMConfig:
        return self.primary.cfg

    @property
    def endpoint(self) -> str:
        return self.primary.endpoint

    @property
    def model(self) -> str:
        return self.primary.model

    async def server_info(
        self, *, refresh: bool = False, lane: str | None = None
    ) -> ServerInfo | None:
        client = self.router.candidates(self.role, lane)[0].client
        return await client.server_info(refresh=refresh)

    async def can_see(self, lane: str | None = None) -> bool:
        """Whether the server this lane's next call goes to takes images (``/props``)."""
        info = await self.server_info(lane=lane)
        return info is not None and info.has_vision

    async def leaves_sessions_alone(self) -> bool:
        """Whether this role's background calls leave every session's KV cache alone: they
        go to a server no chat session uses, or to a llama-server slot of their own."""
        backend = self.router.candidates(self.role, None)[0]
        if backend not in self.router.candidates("chat", None):
            return True
        return await backend.client.leaves_sessions_alone()

    async def render(self, messages: Messages, tools: ToolSpecs | None = None) -> str:
        return await self.primary.render(messages, tools)

    async def chat(
        self,
        messages: Messages,
        tools: ToolSpecs | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        response_format: dict[str, Any] | None = None,
        tool_choice: str | None = None,
        on_status: TextCallback | None = None,
        record: RequestRecorder | None = None,
        lane: str | None = None,
    ) -> LLMResponse:
        def call(c: LLMClient) -> Awaitable[LLMResponse]:
            return c.chat(
                messages,
                tools,
                temperature=temperature,
                max_tokens=max_tokens,
                response_format=response_format,
                tool_choice=tool_choice,
                on_status=on_status,
                record=record,
                lane=lane,
            )

        return await self._routed(call, lane)

    async def stream(
        self,
        messages: Messages,
        tools: ToolSpecs | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        on_text: TextCallback | None = None,
        on_reasoning: TextCallback | None = None,
        on_progress: ProgressCallback | None = None,
        on_status: TextCallback | None = None,
        response_format: dict[str, Any] | None = None,
        tool_choice: str | None = None,
        record: RequestRecorder | None = None,
        lane: str | None = None,
    ) -> LLMResponse:
        shown = False  # once text reached the user, a failure is not retried on another server

        async def seen(text: str) -> None:
            nonlocal shown
            shown = True
            if on_text is not None:
                await on_text(text)

        def call(c: LLMClient) -> Awaitable[LLMResponse]:
            return c.stream(
                messages,
                tools,
                temperature=temperature,
                max_tokens=max_tokens,
                on_text=seen,
                on_reasoning=on_reasoning,
                on_progress=on_progress,
                on_status=on_status,
                response_format=response_format,
                tool_choice=tool_choice,
                record=record,
                lane=lane,
            )

        return await self._routed(call, lane, lambda: shown)

    async def _routed(
        self,
        call: Callable[[LLMClient], Awaitable[LLMResponse]],
        lane: str | None,
        has_shown: Callable[[], bool] = lambda: False,
    ) -> LLMResponse:
        last: LLMError | None = None
        for backend in self.router.candidates(self.role, lane):
            try:
                response = await call(backend.client)
            except REQUEST_ERRORS:
                raise
            except LLMError as e:
                self.router.failed(backend, self.role, e)
                last = e
                if has_shown():
                    raise
                continue
            self.router.succeeded(backend, lane)
            return response
        if last is None:  # pragma: no cover - the router always has a backend
            raise LLMError("no LLM server is configured")
        raise last

    async def close(self) -> None:
        await self.router.close()
