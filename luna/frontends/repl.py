"""Terminal front-end: the same agent API the Discord bot uses.

Invariants:
- stdin is read in one daemon thread (``line_reader.py``), started once, so the event loop
  (other sessions, MCP servers, the librarian) keeps running while the prompt waits, and never
  waits for a thread to start (``Thread.start`` blocks until the thread runs: milliseconds on a
  busy box).
- Ctrl-C cancels the running turn, not the program; Ctrl-D / EOF or ``/quit`` exits with 0.
- Piped (non-tty) stdin: one line per message, replies printed; a failed turn's error is one
  ``error: ...`` line where its reply would be (never repeated on stderr), and the exit code at
  EOF is 1 if any turn failed, else 0.
- The owner is at the keyboard: tools at level ``ask`` prompt y/N here (no answer = deny).
- Everything printed goes through ``write`` or ``paint``, which neutralize control sequences
  (``luna.frontends.terminal``): a reply cannot clear the screen, retitle the window or write
  the clipboard. Colour only on a terminal, never with ``NO_COLOR``.
- A line is taken as typed: undecodable bytes become U+FFFD (visibly), NUL is kept; nothing
  the model sends (a lone surrogate included) can make printing fail.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import secrets
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from luna.attachments.intake import Intake
from luna.errors import LunaError
from luna.frontends.line_reader import LineReader
from luna.frontends.terminal import Palette, neutralize
from luna.frontends.uploads import PendingFiles
from luna.messages import (
    InboundMessage,
    ReasoningDelta,
    Status,
    TextDelta,
    ToolFinished,
    ToolStarted,
    TurnDone,
    TurnFailed,
    clean_text,
)
from luna.tools.permissions import approval_text

if TYPE_CHECKING:  # the running parts are handed in; only their types here
    from luna.agent import Agent
    from luna.config import Config
    from luna.frontends import Components
    from luna.memory import Memory
    from luna.scheduler.delivery import DeliveryRouter
    from luna.scheduler.model import Delivery

HELP = """Commands:
  /help              this help
  /new               start a fresh session (memories stay searchable)
  /session           show the current session id
  /remember TEXT     store a memory
  /forget ID         delete a memory
  /sessions          list recent sessions
  /forget-session [ID]  forget a session (default: this one) with its files and memories
  /memories [QUERY]  list memories, or search them
  /attach PATH       send a file (image, PDF, document) with your next message
  /quit              exit (Ctrl-D works too)
Ctrl-C cancels a running reply."""


MEMORY_CHARS = 200  # of a memory in /memories; the full text is in `luna memory list`
SESSIONS_SHOWN = 20  # by /sessions; `luna sessions list` shows more


def check(cfg: Config, mode: str = "auto") -> None:
    """The terminal needs no settings of its own."""


def make(parts: Components, args: argparse.Namespace) -> Repl:
    return Repl(
        parts.agent,
        parts.memory,
        parts.cfg.data_dir,
        session_id=getattr(args, "session", None),
        banner=parts.banner,
        deliveries=getattr(parts.scheduler, "router", None),
        no_color=parts.cfg.no_color,
        intake=parts.intake,
    )


def _session_file(data_dir: Path) -> Path:
    return data_dir / "repl_session"


def load_session_id(data_dir: Path, requested: str | None) -> str:
    if requested:
        return requested
    with contextlib.suppress(OSError):
        saved = _session_file(data_dir).read_text().strip()
        if saved:
            return saved
    return new_session_id()


def new_session_id() -> str:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    return f"repl-{stamp}-{secrets.token_hex(3)}"  # two /new in one second still differ


def save_session_id(data_dir: Path, session_id: str) -> None:
    with contextlib.suppress(OSError):
        data_dir.mkdir(parents=True, exist_ok=True)
        _session_file(data_dir).write_text(session_id + "\n")


def _tolerant(stream: TextIO, errors: str) -> None:
    """Let ``stream`` pass what it cannot decode or encode instead of raising (``errors``)."""
    reconfigure = getattr(stream, "reconfigure", None)
    if reconfigure is not None:
        with contextlib.suppress(ValueError, OSError):
            reconfigure(errors=errors)


class Repl:
    def __init__(
        self,
        agent: Agent,
        memory: Memory,
        data_dir: Path,
        *,
        session_id: str | None = None,
        stdin: TextIO | None = None,
        stdout: TextIO | None = None,
        banner: str = "",
        deliveries: DeliveryRouter | None = None,
        no_color: bool = False,
        intake: Intake | None = None,
    ) -> None:
        self.agent = agent
        self.memory = memory
        self.data_dir = data_dir
        self.out = stdout or sys.stdout
        stdin = stdin or sys.stdin
        _tolerant(stdin, "surrogateescape")  # undecodable bytes reach clean_text, not a crash
        _tolerant(self.out, "backslashreplace")  # a character the terminal lacks, shown escaped
        self.palette = Palette.for_stream(self.out, no_color=no_color)
        self.interactive = stdin.isatty() and self.out.isatty()
        self.reader = LineReader(stdin, self.interactive, data_dir / "repl_history")
        self.session_id = load_session_id(data_dir, session_id)
        self.banner = banner
        self.deliveries = deliveries  # scheduled results come through it; None: no scheduler
        self._turn: asyncio.Task[None] | None = None
        self.stopping = asyncio.Event()
        self.has_failed_turn = False
        self.files = PendingFiles(intake)  # /attach: files for the next message

    def write(self, text: str) -> None:
        """Print text from anywhere: control sequences are shown, never obeyed."""
        self._emit(neutralize(text))

    def paint(self, style: str, text: str) -> None:
        """Print one of Luna's own lines (``tool``, ``status``, ``error``) in its colour."""
        self._emit(self.palette.paint(style, text))

    def _emit(self, safe: str) -> None:
        self.out.write(safe)
        self.out.flush()

    name = "repl"

    async def run(self, stop: asyncio.Event | None = None) -> int:
        """Serve the terminal until EOF, ``/quit`` or ``stop`` (then the running turn gets the
        agent's shutdown grace before it is cancelled)."""
        watcher = asyncio.create_task(self._stop_when(stop)) if stop is not None else None
        try:
            return await self._serve()
        finally:
            if watcher is not None and not watcher.done():
                watcher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watcher

    async def _stop_when(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self.stop()  # no new input; the running turn gets the grace period
        await self.agent.drain(self.agent.cfg.agent.shutdown_grace)

    async def _serve(self) -> int:
        save_session_id(self.data_dir, self.session_id)
        loop = asyncio.get_running_loop()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(signal.SIGINT, self._on_sigint)
        if self.banner:
            self.write(self.banner + "\n")
        if self.interactive:
            self.write(f"Luna — session {self.session_id}. /help for commands.\n")
        if self.deliveries is not None:  # scheduled results: the held ones now, others as due
            self.deliveries.register("repl", self.show_scheduled)
        try:
            while not self.stopping.is_set():
                read = asyncio.ensure_future(
                    self.reader.read(
                        "you> " if self.interactive else "", on_stale=self._stale_notice
                    )
                )
                stop = asyncio.ensure_future(self.stopping.wait())
                done, _ = await asyncio.wait({read, stop}, return_when=asyncio.FIRST_COMPLETED)
                if stop in done:
                    read.cancel()
                    break
                stop.cancel()
                line = read.result()
                if line is None:
                    break
                line = clean_text(line).strip()
                if not line:
                    continue
                if line.startswith("/"):
                    try:
                        if await self._command(line):
                            break
                    except LunaError as e:  # e.g. the database is busy or damaged: one line
                        self.paint("error", f"error: {e}\n")
                    continue
                self._turn = asyncio.create_task(self._run_turn(line))
                try:
                    await self._turn
                except asyncio.CancelledError:
                    current = asyncio.current_task()
                    if current is not None and current.cancelling():
                        raise  # the REPL itself is being cancelled, not just this turn
                    if self.stopping.is_set():
                        break  # SIGTERM: the drain cancelled the turn after its grace
                    self.write("\n[cancelled]\n")
                finally:
                    self._turn = None
        finally:
            if self.deliveries is not None:
                self.deliveries.unregister("repl")
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.remove_signal_handler(signal.SIGINT)
            self.reader.save_history()
        # A script piping messages in must be able to tell a failed turn; at the terminal
        # the owner saw it.
        return 1 if self.has_failed_turn and not self.interactive else 0

    def _on_sigint(self) -> None:
        if self._turn is not None and not self._turn.done():
            self._turn.cancel()
        else:
            self.write("\n(Ctrl-D or /quit to exit)\n")

    async def show_scheduled(self, delivery: Delivery) -> bool:
        """Print a scheduled task's result: after the reply being streamed, and above the
        line being typed, which is drawn again as it was."""
        while self._turn is not None and not self._turn.done():
            await asyncio.wait({self._turn})
        text = delivery.text.rstrip("\n")
        typing = self.reader.waiting_line() if self.interactive else None
        if typing is None:
            self.write(f"{text}\n")
        else:
            self._emit("\r\x1b[2K")  # Luna's own redraw: clear the line being typed
            self.write(f"{text}\n{typing}")
        return True

    def _stale_notice(self) -> None:
        self.write("\n(the earlier question expired; the next line you type is ignored)\n")

    def stop(self) -> None:
        self.stopping.set()

    async def _approve(self, tool: str, args: dict[str, Any]) -> bool:
        if not self.interactive:
            self.write(f"\n[denied {tool}: approval needs an interactive terminal]\n")
            return False
        self.write(neutralize(f"\n{tool} wants to run with:\n{approval_text(args)}\n"))
        answer = await self.reader.read(
            neutralize(f"allow {tool}? [y/N] "),
            purpose="approval",
            on_stale=self._stale_notice,
        )
        return (answer or "").strip().lower() in {"y", "yes"}

    async def _run_turn(self, typed: str) -> None:
        text, attachments, refused = await self.files.take(typed)
        for line in refused:
            self.paint("error", f"  [not taken: {line}]\n")
        msg = InboundMessage(
            session_id=self.session_id,
            text=text,
            attachments=attachments,
            frontend="repl",
            user_id="owner",
            scope="owner",
            approver=self._approve,
        )
        prefix = "luna> " if self.interactive else ""
        self.write(prefix)
        at_line_start = not prefix
        async for event in self.agent.run_turn(msg):
            if isinstance(event, TextDelta):
                self.write(event.text)
                at_line_start = event.text.endswith("\n")
            elif isinstance(event, ReasoningDelta):
                continue
            elif isinstance(event, Status):
                if event.kind == "progress" and not self.interactive:
                    continue  # a log of percentages helps nobody reading piped output
                self.paint("status", ("" if at_line_start else "\n") + f"  [{event.text}]\n")
                at_line_start = True
            elif isinstance(event, ToolStarted):
                args = (
                    event.arguments if len(event.arguments) < 160 else event.arguments[:160] + "…"
                )
                self.paint(
                    "tool", ("" if at_line_start else "\n") + f"  [tool] {event.name} {args}\n"
                )
                at_line_start = True
            elif isinstance(event, ToolFinished):
                status = "error" if event.is_error else "ok"
                self.paint(
                    "error" if event.is_error else "tool",
                    f"  [tool] {event.name} {status} ({event.duration_s:.1f}s)\n",
                )
                at_line_start = True
            elif isinstance(event, TurnFailed):
                self.has_failed_turn = True
                # In the transcript, where the reply would have been: a script reading stdout
                # sees which message failed; the exit code says that one did.
                line = ("" if at_line_start else "\n") + f"error: {event.message}\n"
                self.paint("error", line)
                at_line_start = True
            elif isinstance(event, TurnDone):
                if not at_line_start:
                    self.write("\n")
                at_line_start = True

    async def _command(self, line: str) -> bool:
        """Handle a /command; True means quit."""
        cmd, _, arg = line.partition(" ")
        arg = arg.strip()
        if cmd in ("/quit", "/exit"):
            return True
        if cmd == "/help":
            self.write(HELP + "\n")
        elif cmd == "/new":
            self.session_id = new_session_id()
            save_session_id(self.data_dir, self.session_id)
            self.write(f"new session {self.session_id}\n")
        elif cmd == "/session":
            self.write(f"session {self.session_id}\n")
        elif cmd == "/remember":
            if not arg:
                self.write("usage: /remember TEXT\n")
            else:
                mid = await self.memory.add_memory(
                    arg, importance=7, source="user", scope="owner", session_id=self.session_id
                )
                self.write(f"remembered (id {mid})\n")
        elif cmd == "/forget":
            if not arg.isdigit():
                self.write("usage: /forget ID (see /memories)\n")
            else:
                ok = await self.memory.forget(int(arg))
                self.write("forgotten\n" if ok else f"no memory with id {arg}\n")
        elif cmd == "/memories":
            await self._memories(arg)
        elif cmd == "/sessions":
            await self._sessions()
        elif cmd == "/forget-session":
            await self._forget_session(arg)
        elif cmd == "/attach":
            self.write((self.files.add(arg) if arg else "usage: /attach PATH") + "\n")
        else:
            self.write(f"unknown command {cmd}; /help lists them\n")
        return False

    async def _sessions(self) -> None:
        from luna.memory import browse

        rows = await browse.list_sessions(self.memory, SESSIONS_SHOWN)
        if not rows:
            self.write("no sessions yet\n")
        for row in rows:
            here = " (this one)" if row["id"] == self.session_id else ""
            last = str(row["last_at"] or "")[:16].replace("T", " ")
            self.write(
                f"  {row['id']}{here}  {row['frontend']}  {last}  {row['messages']} messages, "
                f"{row['files']} files  {row['title'][:60]}\n"
            )

    async def _forget_session(self, arg: str) -> None:
        """``/forget-session [ID] [--yes]``: asks first at a terminal; piped, only with --yes.
        Forgetting this session moves the REPL to a new one."""
        from luna.memory import sessions

        words = arg.split()
        sure = "--yes" in words
        words = [w for w in words if w != "--yes"]
        if len(words) > 1:
            self.write("usage: /forget-session [ID] [--yes] (see /sessions)\n")
            return
        target = words[0] if words else self.session_id
        seen = await sessions.footprint(self.memory, target)
        if seen is None:
            self.write(f"no session {target} (see /sessions)\n")
            return
        if not sure:
            if not self.interactive:
                self.write(f"not asked without a terminal: /forget-session {target} --yes\n")
                return
            self.write(sessions.footprint_text(seen) + "\n")
            answer = await self.reader.read(
                "forget it? this cannot be undone [y/N] ",
                purpose="approval",
                on_stale=self._stale_notice,
            )
            if (answer or "").strip().lower() not in {"y", "yes"}:
                self.write("kept\n")
                return
        async with self.agent.idle_session(target):
            outcome = await sessions.forget_session(
                self.memory, target, outputs_dir=self.agent.cfg.tools.outputs_dir
            )
        self.write(sessions.outcome_text(outcome) + "\n")
        if target == self.session_id:
            self.session_id = new_session_id()
            save_session_id(self.data_dir, self.session_id)
            self.write(f"new session {self.session_id}\n")

    async def _memories(self, query: str) -> None:
        """One line per memory, ``[id] date text`` (the id /forget takes): those related to
        ``query`` (see luna.memory.related), or the latest."""
        if query:
            from luna.memory.related import related_memories

            items = await related_memories(self.memory, query, scope="owner")
            if not items:
                self.write(f"no memory is about {query!r}\n")
            for item in items:
                self.write(_memory_line(item.id, item.created_at, item.text))
            return
        rows = await self.memory.list_memories(scope="owner", limit=50)
        if not rows:
            self.write("no memories yet (/remember TEXT adds one)\n")
        for row in rows:
            self.write(_memory_line(row.get("id"), row.get("created_at", ""), row.get("text", "")))


def _memory_line(memory_id: Any, created_at: Any, text: Any) -> str:
    """One line however many the text has: a listing stays one memory a line."""
    flat = " ".join(str(text).split())
    shown = flat if len(flat) <= MEMORY_CHARS else flat[: MEMORY_CHARS - 1] + "…"
    return f"  [{memory_id}] {str(created_at)[:10]} {shown}\n"
