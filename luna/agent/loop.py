"""The agent loop: one turn = persist, recall, prompt, LLM/tool rounds, persist.

Invariants:
- The user's message is persisted (durably) before anything leaves the process (only recall,
  which reads, runs alongside its commit): once a front-end has handed it over, it is never
  lost. Its text is made valid Unicode first (``clean_text``: a lone surrogate from any
  front-end becomes U+FFFD), so nothing after it (recall, the embedding model, the request)
  can fail on it. The front-end hears of the commit (``InboundMessage.on_stored``) before the
  model is called; a message a dead process stored (``stored_id``) is answered, not logged
  again.
- Turns of one session run strictly in order (a per-session lock); sessions run concurrently.
- A turn runs at most ``agent.max_rounds`` tool rounds (sub-agent rounds count against the same
  budget); at the limit one wrap-up call without tools produces the answer, and when that
  answer is empty the user is told what was left undone.
- Every assistant message is persisted with its reasoning (replayed per
  ``llm.history_reasoning``), each tool call before it runs and each result as it arrives, so
  the next turn sees what ran, even after an interrupted round.
- Tool failures of any kind become results the model reads; only LLM failures end a turn, as
  one short line for the user (TurnFailed) and a traceback in the log.
- Nothing blocking runs here: memory and tools do their own thread hand-off.
- A message's images (a user's attachments, a tool's images) are logged with it and go to the
  model as ``luna.agent.sight`` decides: image parts when its server can see, lines otherwise,
  the same way in every later request.
- Each model call streams through ``agent/streaming.py``: a silent model gets one Status line
  saying Luna is waiting, and how long it will.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from luna import observe
from luna.agent.calls import run_round, vet_calls
from luna.agent.describer import ImageDescriber
from luna.agent.fit import ContextFit
from luna.agent.head import Head, SessionHeads
from luna.agent.images import ImageSource
from luna.agent.notes import EMPTY_REPLY, now_in, round_limit_note
from luna.agent.prompt import (
    as_sent,
    assistant_message,
    attach_context,
    build_messages,
    history_messages,
    render_context,
    user_message,
)
from luna.agent.recorder import request_recorder
from luna.agent.recovery import ModelCall
from luna.agent.sight import Sight, TurnSight
from luna.agent.streaming import stream_reply
from luna.agent.subagent import WRAP_UP_NOTE, TurnBudget, run_subagent
from luna.config import Config
from luna.errors import (
    DatabaseBusyError,
    DatabaseCorruptError,
    LLMError,
    LunaError,
    SessionInUseError,
)
from luna.llm.contract import ChatModel
from luna.memory import format_recall
from luna.memory.contract import SessionMemory
from luna.memory.librarian import Librarian
from luna.memory.storage.request_log import RequestLog
from luna.messages import (
    AgentEvent,
    InboundMessage,
    LLMResponse,
    Status,
    TextDelta,
    TurnDone,
    TurnFailed,
    Usage,
    clean_text,
)
from luna.tasks import finish_or_cancel
from luna.tools.contract import ToolRunner
from luna.tools.registry import ToolContext

log = logging.getLogger(__name__)

SHUTTING_DOWN = "Luna is shutting down; send that again in a moment."
MAX_REMEMBERED_SESSIONS = 256

__all__ = ["WRAP_UP_NOTE", "Agent"]


class Agent:
    """Runs turns for any number of sessions; see the module docstring for the invariants."""

    def __init__(
        self,
        cfg: Config,
        llm: ChatModel,
        memory: SessionMemory,
        registry: ToolRunner,
        librarian: Librarian | None = None,
        requests: RequestLog | None = None,
        *,
        background_llm: ChatModel | None = None,
        subagent_llm: ChatModel | None = None,
        images: ImageSource | None = None,
    ) -> None:
        self.cfg = cfg
        self.llm = llm  # the chat role: the main loop
        # Other roles may be other servers (llm.servers); by default the same one.
        self.background_llm = background_llm or llm  # tools' own model calls (extraction)
        self.subagent_llm = subagent_llm or llm
        self.memory = memory
        self.registry = registry
        self.librarian = librarian
        self.requests = requests  # what was sent, for `luna doctor cache` and `luna replay`
        describer = None
        if images is not None:
            idle = cfg.attachments.describe_after_idle
            describer = ImageDescriber(self.background_llm, memory, images, after_idle=idle)
        self.sight = Sight(llm, images, describer)  # images by content hash; None: lines
        self.fit = ContextFit(cfg.llm.context_tokens, cfg.llm.max_tokens)
        self.heads = SessionHeads(memory, registry)
        self._locks: dict[str, tuple[asyncio.Lock, int]] = {}  # session -> (lock, turns using it)
        self._refused: dict[str, set[str]] = {}  # session -> digests the server refused
        self._active: set[asyncio.Task[Any]] = set()
        self.accepting = True
        self.tools_enabled = True

    # ---- public API -------------------------------------------------------------------

    async def run_turn(self, msg: InboundMessage) -> AsyncIterator[AgentEvent]:
        """Run one turn and yield its events as they happen.

        Closing the iterator early (or cancelling its consumer) cancels the turn; whatever was
        persisted up to then stays.
        """
        msg = dataclasses.replace(msg, text=clean_text(msg.text))
        if not self.accepting:
            yield TurnFailed(SHUTTING_DOWN)
            return
        queue: asyncio.Queue[AgentEvent | None] = asyncio.Queue()
        async with self._session(msg.session_id):
            if not self.accepting:  # shutdown began while this turn waited for the session
                yield TurnFailed(SHUTTING_DOWN)
                return
            task = asyncio.create_task(self._run_turn_task(msg, queue.put_nowait))
            self._active.add(task)
            task.add_done_callback(self._active.discard)
            task.add_done_callback(lambda _t: queue.put_nowait(None))
            try:
                while (event := await queue.get()) is not None:
                    yield event
                await task
            finally:
                if not task.done():
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task

    async def add_note(self, session_id: str, text: str, *, scope: str = "owner") -> int:
        """Append ``text`` as an assistant message to a session between its turns (a
        scheduled task's outcome, shown in that conversation); returns the message id."""
        async with self._session(session_id):
            return await self.memory.append_message(
                session_id, {"role": "assistant", "content": text}, scope=scope
            )

    async def drain(self, deadline: float) -> None:
        """Stop taking turns; wait up to ``deadline`` seconds for running ones, then cancel."""
        self.accepting = False
        await self.sight.aclose()  # image descriptions are background work: they stop first
        pending = await finish_or_cancel(self._active, deadline)
        if pending:
            observe.log_event("turns_cancelled", count=len(pending))

    # ---- sessions ---------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _session(self, session_id: str) -> AsyncIterator[None]:
        """Hold the session's lock; the lock is dropped once no turn uses or awaits it."""
        lock, users = self._locks.get(session_id, (asyncio.Lock(), 0))
        self._locks[session_id] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[session_id]
            if users == 1:
                del self._locks[session_id]
            else:
                self._locks[session_id] = (lock, users - 1)

    @contextlib.asynccontextmanager
    async def idle_session(self, session_id: str) -> AsyncIterator[None]:
        """Hold the session with no turn in it (to forget it): SessionInUseError at once when
        a turn runs or waits in it, else no turn starts until the block is left. The next
        turn reads the log afresh, so it starts from whatever the block left there."""
        if session_id in self._locks:
            raise SessionInUseError(
                f"session {session_id!r} has a turn running; forget it once it has answered"
            )
        async with self._session(session_id):
            self._refused.pop(session_id, None)
            yield

    def _refused_in(self, session_id: str) -> set[str]:
        if session_id not in self._refused and len(self._refused) >= MAX_REMEMBERED_SESSIONS:
            self._refused.pop(next(iter(self._refused)))
        return self._refused.setdefault(session_id, set())

    # ---- one turn ---------------------------------------------------------------------

    async def _run_turn_task(self, msg: InboundMessage, emit: Callable[[AgentEvent], None]) -> None:
        with observe.turn_context(msg.session_id):
            started = asyncio.get_running_loop().time()
            rounds = 0
            error: str | None = None
            self.sight.turn_started()
            try:
                rounds = await asyncio.wait_for(
                    self._turn(msg, emit), timeout=self.cfg.agent.turn_timeout
                )
            except TimeoutError:
                error = "turn_timeout"
                emit(TurnFailed("That took too long and was stopped. Try a smaller request."))
            except LLMError as e:
                error = type(e).__name__
                log.warning("turn failed: %s", e, extra=observe.TURN_DETAIL)
                emit(TurnFailed(str(e)))
            except (DatabaseBusyError, DatabaseCorruptError) as e:
                # The database, not a bug: one line for the user (the message is kept, it
                # says where), no traceback on the terminal.
                error = type(e).__name__
                log.warning("turn failed: %s", e, extra=observe.TURN_DETAIL)
                emit(TurnFailed(str(e)))
            except LunaError as e:
                error = type(e).__name__
                log.exception("turn failed")
                emit(TurnFailed(f"Something went wrong: {e}"))
            except asyncio.CancelledError:
                observe.log_event("turn", cancelled=True)
                raise
            except Exception as e:  # a bug must not kill the daemon
                error = type(e).__name__
                log.exception("turn crashed")
                emit(TurnFailed(f"Internal error ({type(e).__name__}); details are in the log."))
            finally:
                self.sight.turn_ended()
            latency = (asyncio.get_running_loop().time() - started) * 1000
            observe.log_event(
                "turn",
                frontend=msg.frontend,
                rounds=rounds,
                latency_ms=round(latency, 1),
                error=error,
            )

    async def _prompt(
        self, msg: InboundMessage, emit: Callable[[AgentEvent], None]
    ) -> tuple[list[dict[str, Any]], Head, TurnSight]:
        """Log the user's message (durable first), then build the request around it.

        Recall only reads (and leaves this message out anyway), so it runs while the message's
        durable commit does; nothing leaves the process before that commit. The session's head
        (a first turn may wait for MCP servers) is settled meanwhile too."""
        recall = asyncio.create_task(self._recall_block(msg))
        heading = asyncio.create_task(self._head(msg.session_id, emit))
        try:
            logged = user_message(msg.text, msg.attachments)
            message_id = await self._store_user_message(msg, logged)
            summary, records = await self.memory.prompt_history(msg.session_id)
            block = await recall
            head = await heading
        finally:
            recall.cancel()  # a no-op once it is done; stops it when the commit failed
            heading.cancel()
        stored = next((r for r in records if r.id == message_id), None)
        records = [r for r in records if r.id != message_id]  # it goes last, with its context
        text, files_now, context = msg.text, msg.attachments, None
        if msg.stored_id is not None and stored is not None:  # as the dead process stored it
            text, files_now, context = stored.content, stored.attachments, stored.context
        if context is None:
            context = render_context(now_in(self.cfg.agent.timezone), block)
            await self.memory.set_context(message_id, context)
        files = [*(a for r in records for a in r.attachments), *files_now]
        sight = await self.sight.look(msg.session_id, files, emit)
        sent = {**user_message(text, files_now), "content": attach_context(text, context)}
        new = as_sent(sent, sight.parts)
        reasoning = self.cfg.llm.history_reasoning
        history = history_messages(records, reasoning=reasoning, parts=sight.parts)
        skills = head.skills if msg.allow_tools else []  # skills are for those with tool rights
        prompt = self.cfg.agent.system_prompt
        return build_messages(prompt, summary, history, new, skills), head, sight

    async def _store_user_message(self, msg: InboundMessage, logged: dict[str, Any]) -> int:
        """Commit the user's message (unless a turn the process died in already did), then
        tell the front-end it is stored (``on_stored``)."""
        if msg.stored_id is not None:
            return msg.stored_id
        message_id = await self.memory.append_message(msg.session_id, logged, scope=msg.scope)
        if msg.on_stored is not None:
            try:
                await msg.on_stored(message_id)
            except asyncio.CancelledError:
                raise
            except Exception:  # the front-end's bookkeeping must not end the turn
                log.exception("the front-end failed to note a stored message")
        return message_id

    async def _turn(self, msg: InboundMessage, emit: Callable[[AgentEvent], None]) -> int:
        messages, declared, sight = await self._prompt(msg, emit)
        budget = TurnBudget(self.cfg.agent.max_rounds)
        tools, allowed = self._offered_tools(msg, declared)
        ctx = self._tool_context(msg, budget, depth=0, allowed=allowed, declared=declared.names)
        ctx.on_progress = lambda line: emit(Status(line, "progress"))
        call = ModelCall(self.llm, self.fit, self._refused_in(msg.session_id), msg.session_id)
        messages = call.leave_out_refused(messages)
        keep_reasoning = self.cfg.llm.history_reasoning != "drop"

        async def persist(message: dict[str, Any], usage: Usage | None = None) -> None:
            await self.memory.append_message(msg.session_id, message, usage=usage, scope=msg.scope)

        rounds = 0
        usage: Usage | None = None
        while True:
            at_limit = tools is not None and budget.remaining <= 0
            send_tools = tools if tools and not at_limit else None
            extra = [{"role": "user", "content": WRAP_UP_NOTE}] if at_limit else []
            resp, sent = await call(
                messages + extra,
                send_tools,
                functools.partial(
                    stream_reply,
                    llm=self.llm,
                    tools=send_tools,
                    emit=emit,
                    limits=self.cfg.llm,
                    record=request_recorder(self.requests, msg.session_id),
                    lane=msg.session_id,
                ),
            )
            messages = sent[: len(sent) - len(extra)] if extra else sent
            usage = resp.usage or usage
            if not resp.tool_calls or send_tools is None:
                reply, kept = self._final_reply(resp, at_limit, emit)
                stored = assistant_message(kept, [], resp.reasoning if keep_reasoning else "")
                await persist(stored, resp.usage)
                reply = sight.told(reply, emit)
                emit(TurnDone(reply, rounds, usage, finish_reason=resp.finish_reason))
                break
            budget.take()
            rounds += 1
            vetted = vet_calls(resp, self.cfg.agent.max_calls_per_reply)
            reasoning = resp.reasoning if keep_reasoning else ""
            assistant = assistant_message(resp.content, [v.call for v in vetted.calls], reasoning)
            # The call is logged before it runs and each result as it arrives: an interrupted
            # round still shows what ran (the prompt fills a missing result with a placeholder).
            await persist(assistant, resp.usage)
            execute = lambda c: self.registry.execute(c, ctx)  # noqa: E731
            results = await run_round(vetted, execute, emit, persist, keep=self.sight.keep)
            messages.append(assistant)
            messages.extend(await self.sight.results(results, sight, msg.session_id, emit))
        if self.librarian is not None:
            self.librarian.maybe_schedule(
                msg.session_id,
                usage.prompt_tokens if usage else None,
                context_tokens=call.context_tokens,
                overflowed=call.overflowed,
            )
        return rounds

    async def _head(self, session_id: str, emit: Callable[[AgentEvent], None]) -> Head:
        if not self.tools_enabled:
            return Head()
        head = await self.heads.for_session(session_id)
        for line in head.notes:
            emit(Status(line))
        return head

    def _offered_tools(
        self, msg: InboundMessage, head: Head
    ) -> tuple[list[dict[str, Any]] | None, frozenset[str] | None]:
        """The tool specs this turn offers, and the names it may run (None: any)."""
        if not head.tools:
            return None, frozenset()
        if msg.allow_tools:
            return head.tools, None
        guest, allowed = self.heads.for_guest(head)  # no tool rights: the tools for everyone
        return guest or None, allowed

    def _final_reply(
        self, resp: LLMResponse, at_limit: bool, emit: Callable[[AgentEvent], None]
    ) -> tuple[str, str]:
        """The turn's answer as (shown, stored). At the round limit an empty one, or one still
        asking for tools, gets a note saying what was left undone (shown and stored: the model
        should know it ran out). Any other empty answer is shown as a note and stored empty,
        as the model said it."""
        reply = resp.content
        if reply.strip() and not (at_limit and resp.tool_calls):
            return reply, reply
        if not at_limit:
            emit(TextDelta(EMPTY_REPLY))
            return EMPTY_REPLY, reply
        note = round_limit_note(self.cfg.agent.max_rounds, [c.name for c in resp.tool_calls])
        emit(TextDelta(("\n\n" if reply.strip() else "") + note))
        shown = f"{reply.rstrip()}\n\n{note}" if reply.strip() else note
        return shown, shown

    async def _recall_block(self, msg: InboundMessage) -> str:
        # Memory leaves out this session's messages still in the prompt (this one included);
        # "yesterday" is the owner's yesterday (agent.timezone).
        now = now_in(self.cfg.agent.timezone)
        try:
            items = await self.memory.recall(
                msg.text, scope=msg.scope, session_id=msg.session_id, now=now
            )
        except LunaError as e:
            log.warning("recall failed, answering without memories: %s", e)
            return ""
        return format_recall(items, self.cfg.memory.recall_token_budget)

    # ---- sub-agents -------------------------------------------------------------------

    def _tool_context(
        self,
        msg: InboundMessage,
        budget: TurnBudget,
        depth: int,
        workdir: Path | None = None,
        allowed: frozenset[str] | None = None,
        declared: frozenset[str] | None = None,
    ) -> ToolContext:
        async def spawn(task: str, tool_names: list[str] | None, workdir: Path | None) -> str:
            sub_ctx = self._tool_context(msg, budget, depth=1, workdir=workdir)
            return await run_subagent(
                llm=self.subagent_llm,
                registry=self.registry,
                task=task,
                tool_names=tool_names,
                workdir=workdir,
                budget=budget,
                execute=lambda c: self.registry.execute(c, sub_ctx),
                max_calls=self.cfg.agent.max_calls_per_reply,
            )

        return ToolContext(
            session_id=msg.session_id,
            frontend=msg.frontend,
            user_request=msg.text,
            approver=msg.approver,
            llm=self.background_llm,
            run_subagent=spawn if depth == 0 and allowed is None else None,
            depth=depth,
            workdir=workdir,
            user_id=msg.user_id,
            scope=msg.scope,
            address=msg.address,
            allowed_tools=allowed,
            declared=declared,
        )
