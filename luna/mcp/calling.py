"""One request to a server on behalf of the model (a tool call, a resource read): sent at most
once on Luna's own initiative, under a deadline progress can extend, its fate told plainly.

Invariants:
- What became of a request whose session ended is read from the error's type
  (``luna.mcp.rpc``), and decides everything:
  * :class:`NotSent`: it never reached the server (the session was already over, the server
    refused the connection, or an HTTP server no longer knew the session). Nothing ran, so it
    is sent once more, on a new session, once the server is back.
  * :class:`LostInFlight` (``AnswerTooLarge`` included) or any other lost session: it was
    sent and the server stopped before answering. It may or may not have taken effect, so it
    is never sent again here: the model is told so, and that the server is restarting (which
    starts now, in the background); the model decides what to do.
- A request's deadline is its server's ``timeout``. Each progress notification moves it to
  ``timeout`` from then, never past ``mcp.max_call_timeout`` after the start (the TypeScript
  SDK client's ``resetTimeoutOnProgress`` with ``maxTotalTimeout``). Past it the request is
  cancelled (Luna sends ``notifications/cancelled``) and reported with the limit and the
  setting that raises it.
- Progress reaches ``report`` as one line, the first at once, then at most one per
  ``PROGRESS_EVERY`` seconds.
- Never raises except CancelledError; every failure is a ToolResult written for the model.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from luna.mcp.rpc import AnswerTooLarge, NotSent, ProgressCallback, RemoteError
from luna.messages import ToolResult

if TYPE_CHECKING:
    from luna.mcp.session import ServerConnection, Session

log = logging.getLogger(__name__)

PROGRESS_EVERY = 1.0  # seconds between progress lines shown for one request
Send = Callable[["Session", ProgressCallback], Awaitable[dict[str, Any]]]


class Deadline:
    """A request's timeout, moved forward by progress up to a ceiling; shows progress."""

    def __init__(
        self, what: str, timeout: float, ceiling: float, report: Callable[[str], None] | None
    ) -> None:
        self.loop = asyncio.get_running_loop()
        self.what, self.report = what, report
        self.started = self.loop.time()
        self.timeout, self.ceiling = timeout, max(timeout, ceiling)
        self.scope = asyncio.timeout(timeout)
        self.progressed = False
        self.shown_at = -math.inf

    def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        now = self.loop.time()
        self.progressed = True
        if not self.scope.expired():
            self.scope.reschedule(min(now + self.timeout, self.started + self.ceiling))
        if self.report is not None and now - self.shown_at >= PROGRESS_EVERY:
            self.shown_at = now
            done = f"{progress / total:.0%}" if total else f"{progress:g}"
            self.report(f"{self.what}: {done}" + (f" ({message[:120]})" if message else ""))

    def expired_text(self, server: str) -> str:
        ran = self.loop.time() - self.started
        if not self.progressed:
            why = (
                f"timed out after {self.timeout:g} s (the 'timeout' of server '{server}' in "
                "mcp_servers.json raises it)"
            )
        elif ran >= self.ceiling - 0.5:
            why = f"ran {ran:.0f} s, the most a call reporting progress may (mcp.max_call_timeout)"
        else:
            why = f"reported no progress for {self.timeout:g} s (server '{server}' 'timeout')"
        return f"{self.what} {why}; cancelled"


def interrupted(server: str, what: str, error: BaseException) -> str:
    """The model's line for a request that was sent and whose answer never came."""
    if isinstance(error, AnswerTooLarge):
        return (
            f"{what} ran, but the MCP server '{server}' {error}, so the answer was dropped and "
            "the server is restarting. The call may have taken effect; Luna did not run it "
            "again. If you call it again, ask for less (a smaller range, page or query)."
        )
    return (
        f"The MCP server '{server}' stopped while running {what} ({error}). The call had "
        "been sent, so it may or may not have taken effect; Luna did not run it again. The "
        "server is restarting: check whether it took effect before calling it again."
    )


async def send_once(
    conn: ServerConnection, what: str, send: Send, report: Callable[[str], None] | None
) -> dict[str, Any] | ToolResult:
    """The server's answer to ``send``, or the ToolResult saying why there is none."""
    for attempt in (1, 2):
        session = conn.session
        if session is None:
            problem = await conn.ensure_started(in_call=True)
            session = conn.session
            if problem or session is None:
                return ToolResult(conn.not_running(problem or "stopped"), True)
        deadline = Deadline(what, conn.spec.timeout, conn.cfg.mcp.max_call_timeout, report)
        try:
            async with deadline.scope:
                return await send(session, deadline.on_progress)
        except TimeoutError:
            if not deadline.scope.expired():
                raise
            return ToolResult(deadline.expired_text(conn.name), True)
        except NotSent as e:
            # Never reached the server: nothing ran, so it may go once more on a new session.
            conn.mark_lost(session, e)
            if attempt == 1:
                continue
            return ToolResult(conn.not_running(str(e)), True)
        except RemoteError as e:
            text = f"MCP error {e.code}: {e.message}" if e.code else e.message
            return ToolResult(f"MCP server '{conn.name}' error: {text}", True)
        except OSError as e:
            # Sent, and the session ended before the answer: it may have taken effect.
            conn.mark_lost(session, e)
            conn.restart_soon()
            return ToolResult(interrupted(conn.name, what, e), True)
        except Exception as e:  # never raises; the operator gets the trace
            log.exception("MCP server %r: unexpected failure in %s", conn.name, what)
            return ToolResult(
                f"MCP server '{conn.name}': {what} failed unexpectedly ({type(e).__name__})", True
            )
    raise AssertionError("unreachable")  # pragma: no cover
