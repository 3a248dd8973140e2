"""Luna's own JSON API, part two: tools and their runs, usage stats, doctor, settings.

Job: the same code the CLI runs, served as JSON: ``luna.observe.stats`` (``luna stats``: the
summary, plus the per-day series the charts draw and the recent ``tool_run`` events),
``luna.doctor.checks.run_checks`` (``luna doctor --json``), ``luna.config.effective_items``
and ``luna.config.cli.set_value`` (``luna config show`` / ``config set``).

Invariants:
- Log reading, config file writes and config reloads run in worker threads.
- Settings are changed only through ``set_value``: the same validation (bounds, unknown keys
  with "did you mean", secrets refused) and the same comment-keeping write with a backup. The
  running process keeps its configuration; the answer says a restart applies it, and
  ``GET /api/config`` shows such pending values next to the running ones.
- Secrets are masked everywhere (``effective_items``); no handler returns one.
- One doctor run at a time.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from aiohttp import web

from luna.config import Config, default_config_path, effective_items, load_config
from luna.config.cli import set_value
from luna.doctor.checks import CHECKS, run_checks
from luna.errors import ConfigError
from luna.frontends.web.inputs import ApiError, error, json_body, query_int
from luna.frontends.web.state import state
from luna.observe import stats
from luna.scheduler.heartbeat import check_config

MAX_DAYS = 366


def _days(request: web.Request, default: int = 7) -> int:
    days = query_int(request, "days", default, -(2**62), 2**62)
    if days is None or not 1 <= days <= MAX_DAYS:
        raise ApiError(400, f"days must be 1-{MAX_DAYS}")
    return days


# ---- tools -------------------------------------------------------------------------------


async def list_tools(request: web.Request) -> web.Response:
    """``GET /api/tools``: every registered tool with its permission level on the web."""
    registry = state(request).registry
    tools = []
    for info in registry.tools():
        description = (info.description or "").strip().splitlines()
        tools.append(
            {
                "name": info.name,
                "description": description[0] if description else "",
                "level": registry.level_for(info, "web"),
                "expose": info.expose,
            }
        )
    return web.json_response({"tools": tools})


async def tool_runs(request: web.Request) -> web.Response:
    """``GET /api/tools/runs?days=7&limit=100``: the latest tool runs from the event log."""
    cfg = state(request).cfg
    limit = query_int(request, "limit", 100, 1, 1000) or 100
    runs = await asyncio.to_thread(stats.tool_runs, cfg.observe.log_dir, _days(request), limit)
    return web.json_response({"runs": runs})


# ---- stats -------------------------------------------------------------------------------


async def get_stats(request: web.Request) -> web.Response:
    """``GET /api/stats?days=7``: ``luna stats --json`` plus one row per day for the charts."""
    cfg = state(request).cfg
    days = _days(request)

    def read() -> dict[str, Any]:
        summary = stats.collect(cfg.observe.log_dir, days)
        daily = stats.daily(cfg.observe.log_dir, days)
        return {"summary": summary.to_dict(), "daily": [asdict(d) for d in daily]}

    return web.json_response(await asyncio.to_thread(read))


# ---- doctor ------------------------------------------------------------------------------


async def doctor(request: web.Request) -> web.Response:
    """``GET /api/doctor?only=GROUP…``: ``luna doctor --json`` (it can take a while)."""
    cfg = state(request).cfg
    groups = {g for g, _ in CHECKS}
    only = request.query.getall("only", [])
    unknown = [g for g in only if g not in groups]
    if unknown:
        return error(400, f"unknown check group {unknown[0]!r}; one of {', '.join(groups)}")
    lock = state(request).doctor_lock
    if lock.locked():
        return error(409, "doctor is already running")
    async with lock:
        results = await run_checks(cfg, only=only or None)
    failed = [r for r in results if r.failed]
    return web.json_response({"ok": not failed, "checks": [asdict(r) for r in results]})


# ---- settings ----------------------------------------------------------------------------


def _config_path(cfg: Config) -> Path:
    return cfg.path or default_config_path()


def _rows(cfg: Config) -> list[dict[str, Any]]:
    return [{"key": k, "value": v, "source": s} for k, v, s in effective_items(cfg)]


async def get_config(request: web.Request) -> web.Response:
    """``GET /api/config``: every key, its running value and source (``config show``), and the
    value the config file will give it at the next start when that differs."""
    cfg = state(request).cfg
    path = _config_path(cfg)

    def pending() -> tuple[dict[str, Any], str | None]:
        try:
            fresh = load_config(path) if path.exists() else None
        except ConfigError as e:
            return {}, str(e)
        if fresh is None:
            return {}, None
        now = {k: v for k, v, _ in effective_items(cfg)}
        return {k: v for k, v, _ in effective_items(fresh) if now.get(k) != v}, None

    changed, problem = await asyncio.to_thread(pending)
    return web.json_response(
        {
            "path": str(path),
            "items": _rows(cfg),
            "pending": changed,
            "file_error": problem,
        },
        dumps=_dumps,
    )


async def set_config(request: web.Request) -> web.Response:
    """``POST /api/config`` ``{"key": "section.key", "value": "text"}``: ``config set``."""
    body = await json_body(request)
    key, raw = body.get("key"), body.get("value")
    if not isinstance(key, str) or not isinstance(raw, str):
        return error(400, "'key' and 'value' must be strings (the value as you would type it)")
    path = _config_path(state(request).cfg)
    try:
        value, backup = await asyncio.to_thread(set_value, path, key, raw, check=check_config)
    except ConfigError as e:
        return error(400, str(e))
    return web.json_response(
        {
            "key": key,
            "value": value,
            "path": str(path),
            "backup": backup.name if backup is not None else None,
            "note": "written; restart Luna to apply it",
        },
        dumps=_dumps,
    )


def _dumps(obj: Any) -> str:
    return json.dumps(obj, default=str)


def routes() -> list[web.RouteDef]:
    return [
        web.get("/api/tools", list_tools),
        web.get("/api/tools/runs", tool_runs),
        web.get("/api/stats", get_stats),
        web.get("/api/doctor", doctor),
        web.get("/api/config", get_config),
        web.post("/api/config", set_config),
    ]
