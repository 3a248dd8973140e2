"""Composition root: build Luna's parts from Config, start them in order, stop them in reverse.

Start order: the data folder's lock → stdio MCP server processes (``luna.mcp.launch.prelaunch``:
a session's first turn waits for them, and each needs a second or more, so they start before
Luna imports the rest of itself) → logging → tool registry → MCP sessions (in the background)
→ memory (database) → LLM client (maybe
the embedded demo model) → librarian → agent → scheduler → front-ends.
Front-ends all keep one contract (``luna.frontends``), so this module has no branch per
front-end. Stop order is the reverse, each step with a deadline: front-ends stop taking messages,
running turns get ``agent.shutdown_grace`` seconds to finish and are then cancelled, the
librarian finishes or is cancelled, the embedded model is stopped, the database is closed, MCP
servers are stopped and logs are flushed. SIGTERM and SIGINT (outside a REPL turn) trigger it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from luna import frontends, observe
from luna.config import Config, is_llm_endpoint_explicit, secret_values
from luna.datafolder import InstanceLock
from luna.frontends import Components, Frontend

if TYPE_CHECKING:  # imported where used: MCP servers start before the LLM client is loaded
    from luna.agent import Agent
    from luna.llm.router import LLMRouter
    from luna.mcp.launch import Prelaunched

log = logging.getLogger(__name__)

FRONTEND_STOP_S = 15.0  # a front-end gets this long past the grace period to tear down

EMBEDDED_BANNER = (
    "No LLM server answered at {endpoint}, so Luna started its embedded demo model "
    "(Gemma 3 270M, a tiny base model: expect poor answers and no tool use).\n"
    "For the real assistant, run llama-server on localhost:8001 or point Luna at your server:\n"
    "  LLM_ENDPOINT=http://HOST:PORT/v1 python -m luna   (or `luna config set llm.endpoint URL`)"
)


async def _with_deadline(step: Callable[[], Awaitable[None]], seconds: float, name: str) -> None:
    """One shutdown step; a step that hangs is logged and left behind, never waited for."""
    try:
        await asyncio.wait_for(step(), seconds)
    except TimeoutError:
        log.warning("shutdown: %s did not stop within %.0f s", name, seconds)


async def _pick_llm(
    cfg: Config, args: argparse.Namespace, stack: contextlib.AsyncExitStack
) -> tuple[LLMRouter, str, bool]:
    """The configured servers, or — only when none was chosen and nothing answers on the
    default endpoint — the embedded demo model. Returns (router, banner, is_embedded)."""
    from luna.llm import LLMClient
    from luna.llm.embedded import EmbeddedModel, endpoint_alive
    from luna.llm.router import LLMRouter

    llm_cfg = cfg.llm
    banner = ""
    embedded = False
    use_fallback = (
        cfg.llm.embedded_fallback
        and not getattr(args, "no_embedded", False)
        and not is_llm_endpoint_explicit(cfg)
    )
    if use_fallback and not await endpoint_alive(cfg.llm.endpoint, timeout=1.5):
        model = EmbeddedModel(cfg)
        print("Starting the embedded demo model (first start takes a minute)…", file=sys.stderr)
        await model.start()
        stack.push_async_callback(_with_deadline, model.stop, 15.0, "embedded model")
        llm_cfg = model.llm_config(cfg.llm)  # also caps max_tokens: a base model babbles
        banner = EMBEDDED_BANNER.format(endpoint=cfg.llm.endpoint)
        embedded = True
    router = LLMRouter.single(LLMClient(llm_cfg)) if embedded else LLMRouter.from_config(llm_cfg)
    stack.push_async_callback(_with_deadline, router.close, 5.0, "LLM clients")
    return router, banner, embedded


async def build_components(
    cfg: Config,
    args: argparse.Namespace,
    stack: contextlib.AsyncExitStack,
    prelaunched: Prelaunched | None = None,
) -> Components:
    """Start every part except the front-ends; the exit stack stops them in reverse.
    ``prelaunched``: the MCP server processes already started (``luna.mcp.launch``)."""
    from luna.mcp.manager import MCPManager
    from luna.tools import build_registry

    registry = await asyncio.to_thread(build_registry, cfg, probe=True)
    mcp = MCPManager(cfg, registry, prelaunched=prelaunched)
    stack.push_async_callback(_with_deadline, mcp.stop, 30.0, "MCP servers")
    await mcp.start()
    skills = registry.skills
    if skills is not None:  # parsed while the rest starts; a first head then reads no file
        skills.start_warming()

    from luna.agent import Agent
    from luna.agent.image_parts import StoredImages
    from luna.attachments.intake import Intake
    from luna.memory import Memory
    from luna.memory.embedding.embed_worker import EmbeddingProcess
    from luna.memory.librarian import Librarian
    from luna.memory.storage.backup import DailyBackups
    from luna.memory.storage.maintenance import clean_at_start
    from luna.memory.storage.request_log import RequestLog

    memory = Memory(cfg.memory)
    stack.push_async_callback(asyncio.to_thread, EmbeddingProcess.shutdown_all)  # bounded
    # quick_check first: never write to a damaged file; a lost one is not silently replaced.
    await memory.open(check=True, fresh=bool(getattr(args, "fresh_database", False)))
    stack.push_async_callback(_with_deadline, memory.close, 30.0, "database")
    leftovers = await asyncio.to_thread(clean_at_start, cfg.data_dir)  # of a killed backup
    if leftovers.paths:
        print(leftovers.line(), file=sys.stderr)
    backups = DailyBackups(cfg.memory.db_path, cfg.memory.backups_keep)
    backups.start()  # at start when the newest is a day old, then daily; off the event loop
    stack.push_async_callback(_with_deadline, backups.stop, 10.0, "daily backups")
    if not memory.vector_enabled:
        print(
            "warning: sqlite-vec did not load; memory search is keyword-only (see `luna doctor`)",
            file=sys.stderr,
        )
    elif (state := await memory.encoder.prepared_state()) and not state.is_ready:
        from luna.memory.embedding.prepared import not_ready_line

        print(not_ready_line(state), file=sys.stderr)  # the export runs on after this run
        where = str(state.places.export_dir)
        observe.log_event("memory_op", op="model_not_ready", export_dir=where)
    router, banner, embedded = await _pick_llm(cfg, args, stack)
    llm = router.view("chat")
    if not registry.sandbox.ok:  # fails closed either way; say so now, not at the first bash
        print(
            f"warning: bash is not sandboxed: {registry.sandbox.detail} (see `luna doctor`)",
            file=sys.stderr,
        )
    background = router.view("background")
    librarian = Librarian(memory, background, cfg) if cfg.memory.librarian else None
    if librarian is not None:
        stack.push_async_callback(_with_deadline, librarian.aclose, 15.0, "librarian")
    requests = RequestLog.beside(cfg.memory.db_path)
    stack.callback(requests.close)
    intake = Intake(cfg)  # files sent with a message, and the images the agent shows
    agent = Agent(
        cfg,
        llm,
        memory,
        registry,
        librarian,
        requests,
        background_llm=background,
        subagent_llm=router.view("subagent"),
        images=StoredImages(intake.images.load, intake.images.save),
    )
    if embedded:
        agent.tools_enabled = False  # the demo model cannot call tools
    agent.sight.resume()  # image descriptions a stop left undone (luna.agent.describer)
    scheduler = None
    if cfg.scheduler.enabled:
        from luna.scheduler.service import SchedulerService

        scheduler = SchedulerService(cfg, memory, agent, registry)
        await scheduler.start()
        deadline = cfg.agent.shutdown_grace + 15.0
        stack.push_async_callback(_with_deadline, scheduler.stop, deadline, "scheduler")
    return Components(
        cfg, agent, memory, llm, registry, mcp, banner, scheduler=scheduler, intake=intake
    )


async def _serve(frontends: list[Frontend], agent: Agent, stop: asyncio.Event, grace: float) -> int:
    """Run every front-end until one ends or ``stop``; then stop them all, in order. The exit
    code is the highest a front-end returned (the piped REPL returns 1 after a failed turn)."""
    runs = {asyncio.create_task(fe.run(stop), name=f"frontend-{fe.name}") for fe in frontends}
    stopper = asyncio.create_task(stop.wait())
    try:
        await asyncio.wait({*runs, stopper}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopper.cancel()
    stop.set()  # one ended (EOF, /quit, a lost connection): the others stop too
    await agent.drain(grace)
    _, late = await asyncio.wait(runs, timeout=grace + FRONTEND_STOP_S)
    for task in late:
        log.warning("shutdown: front-end %s did not stop; cancelling", task.get_name())
        task.cancel()
    await asyncio.gather(*late, return_exceptions=True)
    for task in runs - late:
        if (error := task.exception()) is not None:
            raise error
    return max((task.result() or 0 for task in runs - late), default=0)


async def run_app(cfg: Config, args: argparse.Namespace, mode: str = "auto") -> int:
    """Run Luna until EOF, /quit, SIGTERM or SIGINT."""
    names = frontends.chosen(cfg, mode)
    frontends.check(names, cfg, mode)
    from luna.memory.embedding.model_cache import QUIET_STEPS_ENV

    # Luna never waits for the embedding model's export: its steps go to the log only (and
    # build_components says once that it is under way). Inherited by the embedding process.
    os.environ[QUIET_STEPS_ENV] = "1"
    instance = InstanceLock(cfg.data_dir)  # one Luna per data folder (luna.datafolder)
    await asyncio.to_thread(instance.acquire, "+".join(names))
    try:
        return await _run(cfg, args, names)
    finally:
        instance.release()


async def _run(cfg: Config, args: argparse.Namespace, names: list[str]) -> int:
    cfg.agent.workspace.mkdir(parents=True, exist_ok=True)
    observe.setup(
        cfg.observe.log_dir,
        level=cfg.observe.level,
        console=cfg.observe.console,
        secrets=secret_values(cfg),
    )
    if "repl" in names:
        # The terminal belongs to the conversation: only warnings reach it, and not those
        # that repeat a failed turn's error line (the REPL prints that once).
        for handler in logging.getLogger().handlers:
            handler.setLevel(logging.WARNING)
            handler.addFilter(observe.hide_turn_details)
    observe.log_event("start", frontend=",".join(names))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        if "repl" not in names:  # the REPL turns Ctrl-C into "cancel this reply"
            loop.add_signal_handler(signal.SIGINT, stop.set)
    try:
        async with contextlib.AsyncExitStack() as stack:
            from luna.mcp.launch import prelaunch

            early = await asyncio.to_thread(prelaunch, cfg, os.environ)
            stack.push_async_callback(asyncio.to_thread, early.stop_unclaimed)
            parts = await build_components(cfg, args, stack, early)
            chosen = frontends.make(names, parts, args)
            code = await _serve(chosen, parts.agent, stop, cfg.agent.shutdown_grace)
            observe.log_event("stop")
        return code
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)
            loop.remove_signal_handler(signal.SIGINT)
        observe.shutdown()
