"""One MCP server connection: its runner task, live session, calls, crash restarts and backoff.

The session (``luna.mcp.stdio`` over the server's pipes, ``luna.mcp.http`` over the SDK) is
entered and exited inside one runner task per start; callers use the live session from their
own task (requests are just messages on its streams). Both speak the wire's JSON objects.

Invariants:
- A start that does not finish ``initialize`` + the first ``tools/list`` within
  ``mcp.start_timeout`` fails; the reason (plus the tail of the server's stderr, which goes to
  ``<observe.log_dir>/mcp/<server>.log``) is kept in ``error``.
- A stdio server's first start adopts the process ``run_app`` started for it at start-up
  (``luna.mcp.launch.prelaunch``) when its entry is unchanged; every other start spawns one.
- ``call()`` and ``read_resource()`` never raise (except CancelledError) and send a request at
  most once on Luna's own initiative (``luna.mcp.calling`` owns that rule: a request that
  never reached the server is sent once more on a new session; one that was sent when the
  session ended is reported, never repeated, and the server restarts in the background).
  Consecutive failures back off 0, 1, 2, 4 ... 60 s, and a call waits out at most
  ``MAX_WAIT_IN_CALL`` of backoff before reporting instead. The backoff reads the
  connection's ``clock`` and waits with its ``sleep`` (``time.monotonic`` and ``asyncio.sleep``
  unless a test passes its own).
- A start that timed out is not waited for again inside a call: the call starts it in the
  background and reports at once, naming the limit and the setting that raises it.
- ``notifications/tools/list_changed`` re-lists the tools and hands them to ``on_tools``.
- A server that writes what is not JSON-RPC to stdout before its handshake is done fails at
  once, after ``GARBAGE_LINES`` such lines (a stray banner line or two is forgiven), with one
  line quoting what it wrote; later stray lines are logged once and ignored.
- ``stop_runner()`` cancels the runner; leaving the session closes the server's stdin and
  SIGTERM/SIGKILLs its process group within about 6 s (bounded by STOP_TIMEOUT).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from luna import __version__
from luna.config import Config
from luna.errors import MCPError
from luna.mcp.calling import send_once
from luna.mcp.config import ServerSpec
from luna.mcp.content import result_of_call, result_of_read
from luna.mcp.launch import Launched, spawn, stop_process
from luna.mcp.rpc import ConnectionLost, ProgressCallback, RemoteError
from luna.messages import ToolResult
from luna.observe import log_event

log = logging.getLogger(__name__)

STOP_TIMEOUT = 10.0  # a stdio server's stop is bounded by about 6 s (luna.mcp.launch)
MAX_BACKOFF = 60.0
MAX_WAIT_IN_CALL = 5.0  # a call waits out a restart backoff up to this long, else reports
STDERR_TAIL = 400
GARBAGE_LINES = 3  # non-JSON-RPC stdout lines forgiven before the handshake, less one
GARBAGE_SHOWN = 80  # characters of such a line quoted in the error
CLIENT_NAME = "luna"
LIST_CHANGED = "notifications/tools/list_changed"


class Session(Protocol):
    """What a connection asks of its server (``RpcSession``, ``HttpSession``)."""

    async def initialize(self) -> None: ...
    async def list_tools(self) -> list[dict[str, Any]]: ...
    async def call_tool(
        self, name: str, arguments: dict[str, Any], on_progress: ProgressCallback | None = None
    ) -> dict[str, Any]: ...
    async def list_resources(self) -> list[dict[str, Any]]: ...
    async def read_resource(self, uri: str) -> dict[str, Any]: ...


class StartTimeoutError(MCPError):
    """A server did not finish ``initialize`` and ``tools/list`` within ``mcp.start_timeout``."""


@dataclass(frozen=True)
class ServerStatus:
    name: str
    state: str  # starting | running | failed | disabled | stopped
    tools: int
    error: str | None = None
    transport: str = "stdio"
    expose: str = "direct"
    restarts: int = 0


def _garbage_sample(line: str) -> str:
    """What a server wrote instead of JSON-RPC, for one line."""
    return repr(line[:GARBAGE_SHOWN] + ("…" if len(line) > GARBAGE_SHOWN else ""))


def _holds(exc: BaseException, kind: type[BaseException]) -> bool:
    """``exc`` is a ``kind``, or an exception group holding one."""
    if isinstance(exc, BaseExceptionGroup):
        return any(_holds(e, kind) for e in exc.exceptions)
    return isinstance(exc, kind)


def _is_lost(exc: BaseException) -> bool:
    """The session is gone (as opposed to the server answering with an error)."""
    return isinstance(exc, OSError) and not isinstance(exc, TimeoutError)


def _describe_error(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe_error(e) for e in exc.exceptions)
    if isinstance(exc, StartTimeoutError):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    if isinstance(exc, RemoteError):
        return f"MCP error {exc.code}: {exc.message}" if exc.code else exc.message
    if isinstance(exc, ConnectionLost | MCPError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"


class ServerConnection:
    """One configured server: its runner task, live session and registered tools."""

    def __init__(
        self,
        spec: ServerSpec,
        cfg: Config,
        environ: Mapping[str, str],
        on_tools: Callable[[ServerConnection, list[dict[str, Any]]], None],
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        launched: Launched | None = None,
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
        self.session: Session | None = None
        self.tool_names: dict[str, str] = {}  # qualified -> original
        self.restarts = 0
        self.failures = 0  # consecutive lost sessions / failed starts
        self.next_start_at = 0.0
        self.lock = asyncio.Lock()  # serializes starts and restarts
        self._launched = launched  # started at start-up, for the first start to adopt
        self._task: asyncio.Task[None] | None = None
        self._started_once = False
        self._reviving: asyncio.Task[None] | None = None  # a restart started by a lost call
        self.start_timed_out = False  # the last start failed by mcp.start_timeout
        self.left_out: dict[str, str] = {}  # tools not offered -> why (task-only tools)
        self._garbage = 0  # lines the server wrote to stdout that are not JSON-RPC
        self._garbage_first = ""  # the first of them, quoted
        self._in_handshake = False
        self._too_much_garbage = asyncio.Event()

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
        self._too_much_garbage = asyncio.Event()
        self._task = asyncio.create_task(self._run(ready), name=f"mcp-{self.name}")
        await ready.wait()
        if self.session is None:
            self._note_failure()
            return False
        return True

    async def _run(self, ready: asyncio.Event) -> None:
        refresh: asyncio.Queue[str] = asyncio.Queue()
        stderr: tuple[Path, int] | None = None
        try:
            try:
                async with self._open(refresh) as (session, stderr):
                    tools = await self._handshake(session)
                    self.session = session
                    self.start_timed_out = False
                    self.on_tools(self, tools)
                    self.state = "running"
                    ready.set()
                    log_event("mcp_server", server=self.name, status="running", tools=len(tools))
                    await self._serve_refreshes(session, refresh)
            except Exception as e:  # any failure of one server is reported, not raised
                self._in_handshake = False
                self.start_timed_out = _holds(e, StartTimeoutError)
                self.error = _describe_error(e)
                if self._garbage and not _holds(e, MCPError):
                    self.error += f"; it wrote non-MCP output to stdout: {self._garbage_first}"
                if stderr is not None:
                    tail = await asyncio.to_thread(_read_tail, *stderr)
                    if tail:
                        self.error += f"; stderr: {tail}"
                if self.state != "stopped":
                    self.state = "failed"
                log.warning("MCP server %r failed: %s", self.name, self.error)
                log_event("mcp_server", server=self.name, status="failed", error=self.error)
        finally:
            self.session = None
            ready.set()

    @contextlib.asynccontextmanager
    async def _open(
        self, refresh: asyncio.Queue[str]
    ) -> AsyncIterator[tuple[Session, tuple[Path, int] | None]]:
        """The session with this server, and (stdio) where its stderr tail is to be read."""

        def on_notification(method: str, _params: dict[str, Any]) -> None:
            if method == LIST_CHANGED:
                refresh.put_nowait("refresh")

        if self.spec.transport != "stdio":
            from luna.mcp.http import http_session  # the MCP SDK: only for HTTP servers

            async with http_session(self.spec, CLIENT_NAME, __version__, on_notification) as s:
                yield s, None
            return
        from luna.mcp.stdio import stdio_session

        launched, self._launched = self._launched, None
        if launched is None or launched.process.poll() is not None:
            launched = await asyncio.to_thread(spawn, self.spec, self.cfg, self.environ)
        async with stdio_session(
            launched,
            CLIENT_NAME,
            __version__,
            on_notification=on_notification,
            on_garbage=self._on_garbage,
        ) as session:
            yield session, (launched.stderr_path, launched.stderr_offset)

    async def _handshake(self, session: Session) -> list[dict[str, Any]]:
        """``initialize`` and the first ``tools/list``, within ``mcp.start_timeout``; fails at
        once when the server writes too much that is not MCP meanwhile."""

        async def shake() -> list[dict[str, Any]]:
            await session.initialize()
            return await session.list_tools()

        self._in_handshake = True
        handshake = asyncio.ensure_future(shake())
        garbage = asyncio.ensure_future(self._too_much_garbage.wait())
        try:
            done, _ = await asyncio.wait(
                {handshake, garbage},
                timeout=self.cfg.mcp.start_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            self._in_handshake = False
            for task in (handshake, garbage):
                task.cancel()
            await asyncio.gather(handshake, garbage, return_exceptions=True)
        if handshake in done:
            return handshake.result()
        if garbage in done:
            raise MCPError(
                f"it does not speak MCP on stdout: it wrote {self._garbage_first} "
                "(an MCP server must write only JSON-RPC there; logs go to stderr)"
            )
        limit = self.cfg.mcp.start_timeout
        raise StartTimeoutError(
            f"it did not finish starting (initialize and tools/list) within {limit:g} s; "
            "raise mcp.start_timeout in config.toml for a server that is slow to start"
        )

    async def _serve_refreshes(self, session: Session, refresh: asyncio.Queue[str]) -> None:
        """Live until cancelled; re-list tools whenever the server says they changed."""
        while True:
            await refresh.get()
            while not refresh.empty():  # coalesce bursts of notifications
                refresh.get_nowait()
            try:
                async with asyncio.timeout(self.cfg.mcp.start_timeout):
                    tools = await session.list_tools()
            except Exception as e:  # a failed refresh keeps the old list
                if _is_lost(e):
                    raise
                log.warning("MCP server %r: refreshing tools failed: %s", self.name, e)
                continue
            self.on_tools(self, tools)
            log_event("mcp_server", server=self.name, status="tools_changed", tools=len(tools))

    def _on_garbage(self, line: str) -> None:
        """A line on stdout that is not JSON-RPC."""
        self._garbage += 1
        if self._garbage == 1:
            self._garbage_first = _garbage_sample(line)
        if self._in_handshake and self._garbage >= GARBAGE_LINES:
            self._too_much_garbage.set()  # fail now, not at mcp.start_timeout
        elif not self._in_handshake and self._garbage == 1:
            log.warning(
                "MCP server %r wrote non-MCP output to stdout (ignored): %s",
                self.name,
                self._garbage_first,
            )

    async def stop_runner(self) -> None:
        """End the current runner (if any) and wait for its server to stop."""
        task = self._task
        self._task = None
        if task is None:
            return
        task.cancel()
        done, _ = await asyncio.wait({task}, timeout=STOP_TIMEOUT)
        if not done:
            log.warning(
                "MCP server %r did not stop within %.0f s; cancelling", self.name, STOP_TIMEOUT
            )
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def discard_launched(self) -> None:
        """Stop the process started for this server at start-up if no start adopted it."""
        launched, self._launched = self._launched, None
        if launched is not None:
            await asyncio.to_thread(stop_process, launched.process)

    # ---- calls -------------------------------------------------------------------------------

    async def call(
        self,
        tool: str,
        arguments: dict[str, Any],
        report: Callable[[str], None] | None = None,
    ) -> ToolResult:
        """Call ``tool``; progress lines go to ``report``. See ``luna.mcp.calling``."""

        async def send(session: Session, on_progress: ProgressCallback) -> dict[str, Any]:
            return await session.call_tool(tool, arguments, on_progress)

        answer = await send_once(self, f"{self.name}__{tool}", send, report)
        if isinstance(answer, ToolResult):
            return answer
        self.failures = 0
        return result_of_call(answer, self.name)

    async def read_resource(self, uri: str) -> ToolResult:
        """``resources/read`` of the server's own ``uri``."""

        async def send(session: Session, _on_progress: ProgressCallback) -> dict[str, Any]:
            return await session.read_resource(uri)

        answer = await send_once(self, f"reading {uri}", send, None)
        return answer if isinstance(answer, ToolResult) else result_of_read(answer, self.name)

    def restart_soon(self) -> None:
        """Start this server again in the background (after a call lost its session)."""
        if self._reviving is None or self._reviving.done():
            self._reviving = asyncio.create_task(self._revive(), name=f"mcp-revive-{self.name}")

    async def _revive(self) -> None:
        problem = await self.ensure_started()
        if problem:
            log.warning("MCP server %r: restart after a lost call failed: %s", self.name, problem)

    async def cancel_revival(self) -> None:
        """Stop a background restart (before stopping the runner at shutdown)."""
        task, self._reviving = self._reviving, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def mark_lost(self, session: Session, exc: BaseException) -> None:
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

    async def ensure_started(self, *, in_call: bool = False) -> str | None:
        """Restart a dead server (honouring backoff). Returns a problem description or None.

        ``in_call``: a call is waiting; a server whose last start timed out is then started in
        the background and the call told at once, not held for another ``start_timeout``."""
        if in_call and self.start_timed_out and self.session is None:
            self.restart_soon()
            return f"{self.error}. Luna is starting it again in the background"
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


def _read_tail(path: Path, offset: int) -> str:
    try:
        with path.open("rb") as f:
            f.seek(offset)
            data = f.read()
    except OSError:
        return ""
    text = data.decode("utf-8", "replace").strip()
    return " | ".join(text[-STDERR_TAIL:].splitlines()[-5:])
