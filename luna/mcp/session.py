"""One MCP server connection: its runner task, live session, calls, crash restarts and backoff.

The transport (``stdio_client`` or ``streamable_http_client``) and the ``ClientSession`` are
entered and exited inside one runner task per start, so anyio cancel scopes never cross tasks;
callers use the live session from their own task (requests are just messages on its streams).

Invariants:
- A start that does not finish ``initialize`` + the first ``tools/list`` within
  ``mcp.start_timeout`` fails; the reason (plus the tail of the server's stderr, which goes to
  ``<observe.log_dir>/mcp/<server>.log``) is kept in ``error``.
- ``call()`` never raises (except CancelledError): failures come back as error ToolResults
  written for the model. A lost session (crash, EOF, closed stream) restarts the server and
  retries that call once; consecutive failures back off 0, 1, 2, 4 ... 60 s, and a call waits
  out at most ``MAX_WAIT_IN_CALL`` of backoff before reporting instead. The backoff reads the
  connection's ``clock`` and waits with its ``sleep`` (``time.monotonic`` and ``asyncio.sleep``
  unless a test passes its own). A call past its timeout
  is cancelled (the SDK sends ``notifications/cancelled``) and reported.
- ``notifications/tools/list_changed`` re-lists the tools and hands them to ``on_tools``.
- A server that writes what is not JSON-RPC to stdout before its handshake is done fails at
  once, after ``GARBAGE_LINES`` such lines (a stray banner line or two is forgiven), with one
  line quoting what it wrote; later stray lines are logged once and ignored. The SDK's own
  traceback for each such line is kept out of the console (``_quiet_parse_errors``).
- ``stop_runner()`` cancels the runner's own cancel scope; the SDK then closes stdin and
  SIGTERM/SIGKILLs the server's process group within about 6.5 s (bounded by STOP_TIMEOUT).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError as SDKError
from pydantic import ValidationError

from luna.config import Config
from luna.errors import MCPError
from luna.mcp.config import ServerSpec, describe_result, server_env
from luna.messages import ToolResult
from luna.observe import log_event

log = logging.getLogger(__name__)

STOP_TIMEOUT = 10.0  # the SDK's stdio shutdown is bounded by about 6.5 s
MAX_BACKOFF = 60.0
MAX_WAIT_IN_CALL = 5.0  # a call waits out a restart backoff up to this long, else reports
STDERR_TAIL = 400
GARBAGE_LINES = 3  # non-JSON-RPC stdout lines forgiven before the handshake, less one
GARBAGE_SHOWN = 80  # characters of such a line quoted in the error
CLIENT_INFO = types.Implementation(name="luna", version="0.1")

# Errors that mean the session is gone (as opposed to the server answering with an error).
_LOST = (
    anyio.ClosedResourceError,
    anyio.BrokenResourceError,
    anyio.EndOfStream,
    httpx2.TransportError,
    OSError,
)


@dataclass(frozen=True)
class ServerStatus:
    name: str
    state: str  # starting | running | failed | disabled | stopped
    tools: int
    error: str | None = None
    transport: str = "stdio"
    expose: str = "direct"
    restarts: int = 0


def _quiet_parse_errors(record: logging.LogRecord) -> bool:
    """The SDK logs a full pydantic traceback for each line a server writes that is not
    JSON-RPC; Luna reports those itself, in one line (see ``ServerConnection._on_message``)."""
    return record.funcName != "_parse_line"


logging.getLogger("mcp.client.stdio").addFilter(_quiet_parse_errors)


def _garbage_sample(exc: Exception) -> str:
    """What a server wrote instead of JSON-RPC (the line pydantic refused), for one line."""
    text = ""
    if isinstance(exc, ValidationError) and exc.errors():
        text = str(exc.errors()[0].get("input", ""))
    text = text or str(exc)
    return repr(text[:GARBAGE_SHOWN] + ("…" if len(text) > GARBAGE_SHOWN else ""))


def _holds(exc: BaseException, kind: type[BaseException]) -> bool:
    """``exc`` is a ``kind``, or an exception group holding one."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_holds(e, kind) for e in exc.exceptions)
    return isinstance(exc, kind)


def _is_lost(exc: BaseException) -> bool:
    if isinstance(exc, SDKError):
        return exc.code == types.CONNECTION_CLOSED
    return isinstance(exc, _LOST)


def _describe_error(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe_error(e) for e in exc.exceptions)
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    if isinstance(exc, SDKError):
        return f"MCP error {exc.code}: {exc.message}"
    if isinstance(exc, MCPError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class ServerConnection:
    """One configured server: its runner task, live session and registered tools."""

    def __init__(
        self,
        spec: ServerSpec,
        cfg: Config,
        environ: Mapping[str, str],
        on_tools: Callable[[ServerConnection, list[types.Tool]], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.spec = spec
        self.clock = clock  # seconds, for the restart backoff
        self.sleep = sleep  # waits out a backoff inside a call
        self.cfg = cfg
        self.environ = environ
        self.on_tools = on_tools  # registers the (new) tool list; sets tool_names
        self.is_stopping = False
        self.state = "disabled" if not spec.enabled else ("failed" if spec.error else "starting")
        self.error = f"invalid entry: {spec.error}" if spec.error else None
        self.session: ClientSession | None = None
        self.tool_names: dict[str, str] = {}  # qualified -> original
        self.restarts = 0
        self.failures = 0  # consecutive lost sessions / failed starts
        self.next_start_at = 0.0
        self.lock = asyncio.Lock()  # serializes starts and restarts
        self._task: asyncio.Task[None] | None = None
        self._scope: anyio.CancelScope | None = None
        self._started_once = False
        self._garbage = 0  # lines the server wrote to stdout that are not JSON-RPC
        self._garbage_first = ""  # the first of them, quoted
        self._handshake: anyio.CancelScope | None = None  # cancelled by too much garbage

    @property
    def name(self) -> str:
        return self.spec.name

    # ---- runner ------------------------------------------------------------------------------

    async def start_and_wait(self) -> bool:
        """Launch a runner and wait until it is running or has failed. Call under ``lock``."""
        await self.stop_runner()
        if self._started_once:
            self.restarts += 1
        self._started_once = True
        self.state, self.error = "starting", None
        log_event("mcp_server", server=self.name, status="starting", restarts=self.restarts)
        ready = asyncio.Event()
        self._garbage, self._garbage_first = 0, ""
        self._task = asyncio.create_task(self._run(ready), name=f"mcp-{self.name}")
        await ready.wait()
        if self.session is None:
            self._note_failure()
            return False
        return True

    async def _run(self, ready: asyncio.Event) -> None:
        cfg = self.cfg.mcp
        refresh: asyncio.Queue[str] = asyncio.Queue()
        stderr_path, offset, errlog = None, 0, None
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                try:
                    async with contextlib.AsyncExitStack() as stack:
                        if self.spec.transport == "stdio":
                            stderr_path, errlog = await self._open_stderr_log()
                            stack.callback(errlog.close)
                            offset = errlog.tell()
                        transport = self._transport(errlog)
                        read, write = await stack.enter_async_context(transport)
                        session = await stack.enter_async_context(
                            ClientSession(
                                read,
                                write,
                                message_handler=functools.partial(self._on_message, refresh),
                                client_info=CLIENT_INFO,
                            )
                        )
                        with (
                            anyio.fail_after(cfg.start_timeout),
                            anyio.CancelScope() as handshake,
                        ):
                            self._handshake = handshake
                            await session.initialize()
                            tools = await _list_all_tools(session)
                        self._handshake = None
                        if handshake.cancelled_caught:
                            raise MCPError(
                                f"it does not speak MCP on stdout: it wrote {self._garbage_first} "
                                "(an MCP server must write only JSON-RPC there; logs go to "
                                "stderr)"
                            )
                        self.session = session
                        self.on_tools(self, tools)
                        self.state = "running"
                        ready.set()
                        log_event(
                            "mcp_server", server=self.name, status="running", tools=len(tools)
                        )
                        await self._serve_refreshes(session, refresh)
                except Exception as e:  # noqa: BLE001 - any failure of one server is reported, not raised
                    self._handshake = None
                    self.error = _describe_error(e)
                    if self._garbage and not _holds(e, MCPError):
                        self.error += f"; it wrote non-MCP output to stdout: {self._garbage_first}"
                    if stderr_path is not None:
                        tail = await asyncio.to_thread(_read_tail, stderr_path, offset)
                        if tail:
                            self.error += f"; stderr: {tail}"
                    if self.state != "stopped":
                        self.state = "failed"
                    log.warning("MCP server %r failed: %s", self.name, self.error)
                    log_event("mcp_server", server=self.name, status="failed", error=self.error)
        finally:
            self.session = None
            self._scope = None
            ready.set()

    def _transport(self, errlog: Any) -> Any:
        spec = self.spec
        if spec.transport == "stdio":
            params = StdioServerParameters(
                command=spec.command,
                args=spec.args,
                env=server_env(spec, self.environ),
                cwd=spec.cwd,
            )
            return stdio_client(params, errlog=errlog)
        return _http_transport(spec)

    async def _open_stderr_log(self) -> tuple[Path, Any]:
        path = self.cfg.observe.log_dir / "mcp" / f"{self.name}.log"

        def open_log() -> Any:
            path.parent.mkdir(parents=True, exist_ok=True)
            return path.open("a", encoding="utf-8")

        return path, await asyncio.to_thread(open_log)

    async def _serve_refreshes(self, session: ClientSession, refresh: asyncio.Queue[str]) -> None:
        """Live until cancelled; re-list tools whenever the server says they changed."""
        while True:
            await refresh.get()
            while not refresh.empty():  # coalesce bursts of notifications
                refresh.get_nowait()
            try:
                with anyio.fail_after(self.cfg.mcp.start_timeout):
                    tools = await _list_all_tools(session)
            except Exception as e:  # noqa: BLE001 - a failed refresh keeps the old list
                if _is_lost(e):
                    raise
                log.warning("MCP server %r: refreshing tools failed: %s", self.name, e)
                continue
            self.on_tools(self, tools)
            log_event("mcp_server", server=self.name, status="tools_changed", tools=len(tools))

    async def _on_message(self, refresh: asyncio.Queue[str], message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            refresh.put_nowait("refresh")
        elif isinstance(message, Exception):  # a line on stdout that is not JSON-RPC
            self._garbage += 1
            if self._garbage == 1:
                self._garbage_first = _garbage_sample(message)
            if self._handshake is not None and self._garbage >= GARBAGE_LINES:
                self._handshake.cancel()  # fail now, not at mcp.start_timeout
            elif self._handshake is None and self._garbage == 1:
                log.warning(
                    "MCP server %r wrote non-MCP output to stdout (ignored): %s",
                    self.name,
                    self._garbage_first,
                )

    async def stop_runner(self) -> None:
        """End the current runner (if any) and wait for its transport to close."""
        task, scope = self._task, self._scope
        self._task = None
        if task is None:
            return
        if scope is not None:
            scope.cancel()
        done, _ = await asyncio.wait({task}, timeout=STOP_TIMEOUT)
        if not done:
            log.warning(
                "MCP server %r did not stop within %.0f s; cancelling", self.name, STOP_TIMEOUT
            )
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    # ---- calls -------------------------------------------------------------------------------

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        for attempt in (1, 2):
            session = self.session
            if session is None:
                problem = await self.ensure_started()
                if problem:
                    return ToolResult(self.not_running(problem), True)
                session = self.session
                if session is None:  # stopped meanwhile
                    return ToolResult(self.not_running("stopped"), True)
            deadline = asyncio.timeout(self.spec.timeout)
            try:
                async with deadline:
                    result = await session.call_tool(tool, arguments)
            except TimeoutError:
                if not deadline.expired():
                    raise
                return ToolResult(
                    f"{self.name}__{tool} timed out after {self.spec.timeout:g} s; cancelled",
                    True,
                )
            except (SDKError, ValidationError, RuntimeError, *_LOST) as e:
                if not _is_lost(e):
                    return ToolResult(f"MCP server '{self.name}' error: {_describe_error(e)}", True)
                self._mark_lost(session, e)
                if attempt == 1:
                    continue
                return ToolResult(
                    f"MCP server '{self.name}' stopped again while running '{tool}' after a "
                    "restart; not retrying",
                    True,
                )
            except Exception as e:  # noqa: BLE001 - call() never raises; the operator gets the trace
                log.exception("MCP server %r: unexpected failure calling %r", self.name, tool)
                return ToolResult(
                    f"MCP server '{self.name}': {tool} failed unexpectedly ({type(e).__name__})",
                    True,
                )
            self.failures = 0
            return ToolResult(describe_result(result), is_error=bool(result.is_error))
        return ToolResult(self.not_running("stopped"), True)  # pragma: no cover

    def _mark_lost(self, session: ClientSession, exc: BaseException) -> None:
        if self.session is not session:
            return  # someone else already noticed
        self.session = None
        self.state, self.error = "starting", f"session lost: {_describe_error(exc)}"
        self._note_failure()
        log.warning("MCP server %r: %s", self.name, self.error)
        log_event("mcp_server", server=self.name, status="lost", error=self.error)

    def _note_failure(self) -> None:
        self.failures += 1
        delay = 0.0 if self.failures <= 1 else min(2.0 ** (self.failures - 2), MAX_BACKOFF)
        self.next_start_at = self.clock() + delay

    def not_running(self, problem: str) -> str:
        """The line the model reads for a call this server cannot take now."""
        return (
            f"The MCP server '{self.name}' is not running ({problem}); its tools are "
            "unavailable until it is back."
        )

    async def ensure_started(self) -> str | None:
        """Restart a dead server (honouring backoff). Returns a problem description or None."""
        async with self.lock:
            if self.session is not None:
                return None
            if self.is_stopping:
                return "Luna is shutting down"
            if not self.spec.enabled or self.spec.error:
                return self.error or "disabled"
            wait = self.next_start_at - self.clock()
            if wait > MAX_WAIT_IN_CALL:
                return f"{self.error or 'not running'}; next restart attempt in {wait:.0f} s"
            if wait > 0:
                await self.sleep(wait)
            if await self.start_and_wait():
                log_event(
                    "mcp_server", server=self.name, status="restarted", restarts=self.restarts
                )
                return None
            return self.error or "failed to start"

    def status(self) -> ServerStatus:
        return ServerStatus(
            name=self.name,
            state=self.state,
            tools=len(self.tool_names),
            error=self.error,
            transport=self.spec.transport,
            expose=self.spec.expose,
            restarts=self.restarts,
        )


@contextlib.asynccontextmanager
async def _http_transport(spec: ServerSpec) -> Any:
    async with (
        create_mcp_http_client(headers=spec.headers or None) as client,
        streamable_http_client(spec.url, http_client=client) as streams,
    ):
        yield streams


async def _list_all_tools(session: ClientSession) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            return tools


def _read_tail(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace").strip()
    return " | ".join(text[-STDERR_TAIL:].splitlines()[-5:])
