"""Composition root: build Luna's parts from Config, start them in order, stop them in reverse.

Start order: logging → memory (database) → LLM client (maybe the embedded demo model) → tool
registry → MCP servers (in the background) → librarian → agent → front-end.
Stop order is the reverse, each step with a deadline: the front-end stops taking messages,
running turns get ``agent.shutdown_grace`` seconds to finish and are then cancelled, the
librarian finishes or is cancelled, MCP servers and the embedded model are stopped, logs are
flushed and the database is closed. SIGTERM and SIGINT (outside a REPL turn) trigger it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from luna import observe
from luna.config import Config, is_llm_endpoint_explicit, secret_values
from luna.errors import ConfigError, LunaError
from luna.llm import LLMClient

log = logging.getLogger(__name__)

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
) -> tuple[LLMClient, str, bool]:
    """The configured endpoint, or — only when none was chosen and nothing answers on the
    default one — the embedded demo model. Returns (client, banner, is_embedded)."""
    from luna.llm.embedded import EmbeddedModel, endpoint_alive

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
    llm = LLMClient(llm_cfg)
    stack.push_async_callback(_with_deadline, llm.close, 5.0, "LLM client")
    return llm, banner, embedded


async def build_components(
    cfg: Config, args: argparse.Namespace, stack: contextlib.AsyncExitStack
) -> dict[str, Any]:
    """Start every part except the front-end; the exit stack stops them in reverse."""
    from luna.agent import Agent
    from luna.mcp.manager import MCPManager
    from luna.memory import Memory
    from luna.memory.embed_worker import EmbeddingProcess
    from luna.memory.librarian import Librarian
    from luna.tools import build_registry, sandbox_status

    memory = Memory(cfg.memory)
    stack.push_async_callback(asyncio.to_thread, EmbeddingProcess.shutdown_all)  # bounded
    await memory.open()
    stack.push_async_callback(_with_deadline, memory.close, 30.0, "database")
    if not memory.vector_enabled:
        print(
            "warning: sqlite-vec did not load; memory search is keyword-only (see `luna doctor`)",
            file=sys.stderr,
        )
    llm, banner, embedded = await _pick_llm(cfg, args, stack)
    registry = build_registry(cfg)
    sandbox_ok, sandbox_detail = await asyncio.to_thread(sandbox_status, cfg, probe=True)
    if not sandbox_ok:
        # Fails closed either way; say so now rather than at the first bash call.
        registry.forced_levels["bash"] = "ask"
        print(
            f"warning: bash is not sandboxed: {sandbox_detail} (see `luna doctor`)", file=sys.stderr
        )
    mcp = MCPManager(cfg, registry)
    stack.push_async_callback(_with_deadline, mcp.stop, 30.0, "MCP servers")
    await mcp.start()
    librarian = Librarian(memory, llm, cfg) if cfg.memory.librarian else None
    if librarian is not None:
        stack.push_async_callback(_with_deadline, librarian.aclose, 15.0, "librarian")
    agent = Agent(cfg, llm, memory, registry, librarian)
    if embedded:
        agent.tools_enabled = False  # the demo model cannot call tools
    return {
        "memory": memory,
        "llm": llm,
        "registry": registry,
        "mcp": mcp,
        "agent": agent,
        "banner": banner,
    }


async def run_app(cfg: Config, args: argparse.Namespace, mode: str = "auto") -> int:
    """Run Luna until EOF, /quit, SIGTERM or SIGINT."""
    cfg.agent.workspace.mkdir(parents=True, exist_ok=True)
    use_discord = mode == "auto" and bool(cfg.discord.token)
    if use_discord:
        from luna.doctor.checks import discord_token_problem

        problem = discord_token_problem(cfg.discord.token)
        if problem:
            raise ConfigError(
                f"DISCORD_TOKEN is not a Discord bot token ({problem}); copy it from the "
                "Developer Portal (Bot → Reset Token), or unset it to use the terminal"
            )
    observe.setup(
        cfg.observe.log_dir,
        level=cfg.observe.level,
        console=cfg.observe.console,
        secrets=secret_values(cfg),
    )
    if not use_discord:
        # The terminal belongs to the conversation: only warnings reach it.
        for handler in logging.getLogger().handlers:
            handler.setLevel(logging.WARNING)
    observe.log_event("start", frontend="discord" if use_discord else "repl")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        async with contextlib.AsyncExitStack() as stack:
            parts = await build_components(cfg, args, stack)
            agent = parts["agent"]
            if use_discord:
                from luna.frontends.discord.bot import LunaBot

                bot = LunaBot(cfg, agent, parts["memory"])
                frontend = asyncio.create_task(bot.start(cfg.discord.token))
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.add_signal_handler(signal.SIGINT, stop.set)
                stopper = asyncio.create_task(stop.wait())
                await asyncio.wait({frontend, stopper}, return_when=asyncio.FIRST_COMPLETED)
                stopper.cancel()
                await agent.drain(cfg.agent.shutdown_grace)
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(bot.close(), timeout=10)
                if frontend.done() and not frontend.cancelled() and frontend.exception():
                    error = frontend.exception()
                    log.error("the Discord bot stopped", exc_info=error)
                    raise LunaError(f"the Discord bot stopped: {error}") from error
                frontend.cancel()
            else:
                from luna.frontends.repl import Repl

                repl = Repl(
                    agent,
                    parts["memory"],
                    cfg.data_dir,
                    session_id=getattr(args, "session", None),
                    banner=parts["banner"],
                )

                async def stop_on_signal() -> None:
                    await stop.wait()
                    repl.stop()  # no new input; the running turn gets the grace period
                    await agent.drain(cfg.agent.shutdown_grace)

                stopper = asyncio.create_task(stop_on_signal())
                try:
                    await repl.run()
                finally:
                    if not stop.is_set():
                        stopper.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await stopper
                await agent.drain(cfg.agent.shutdown_grace)
            observe.log_event("stop")
        return 0
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)
        observe.shutdown()
