"""``luna schedule …``: list, add, cancel, run-now, runs — the owner's view of the scheduler.

Invariants:
- Each command opens the database, calls :class:`luna.scheduler.api.Schedules` as the owner
  (the same code the model's tools and the web use) and closes it; a running Luna notices
  the change within ``scheduler.poll_interval``.
- A refusal (bad time, unknown id) is one line on stderr and exit code 1, never a traceback.
- ``--json``: ``list`` and ``runs`` print one JSON object per line, the others one object.
- A task's text and a run's output (the model's) reach the terminal only through
  ``neutralize`` / ``terminal_json``.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from luna.config import Config
from luna.errors import NoSuchTaskError, ScheduleError
from luna.ids import id_argument
from luna.messages import clean_text, neutralize, terminal_json
from luna.scheduler.api import open_schedules, task_json, task_line
from luna.scheduler.model import Requester, Task, TaskRequest, owner_target


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("schedule", help="reminders and scheduled tasks")
    sub = p.add_subparsers(dest="schedule_command", required=True, metavar="COMMAND")

    ls = sub.add_parser("list", help="scheduled tasks, next due first")
    ls.add_argument("--all", action="store_true", help="also done, missed, failed, cancelled")
    ls.add_argument("--json", action="store_true", help="one JSON object per task")
    ls.set_defaults(handler=list_cmd)

    a = sub.add_parser("add", help="schedule a reminder (or, with --prompt, a task to run)")
    a.add_argument("text", help="the reminder text, or the prompt to run then")
    when = a.add_mutually_exclusive_group(required=True)
    when.add_argument("--at", metavar="TIME", help='local time "YYYY-MM-DD HH:MM"')
    when.add_argument("--after", metavar="DELAY", help="a delay: 20m, 2h, 1h30m, 3d")
    when.add_argument("--cron", metavar="EXPR", help='five-field cron: "0 8 * * 1-5"')
    when.add_argument("--every", metavar="INTERVAL", help="an interval: 30m, 6h, 1d")
    a.add_argument("--prompt", action="store_true", help="run TEXT as a turn with tools")
    a.add_argument(
        "--to",
        choices=("auto", "repl", "discord", "telegram"),
        default="auto",
        help="where to deliver: the terminal or a Discord DM to discord.owner_id "
        "(auto: Discord when a token and owner_id are set)",
    )
    a.add_argument("--json", action="store_true", help="print the task as JSON")
    a.set_defaults(handler=add_cmd)

    for name, handler, text in (
        ("cancel", cancel_cmd, "cancel a task"),
        ("run-now", run_now_cmd, "make a task due now (a running Luna fires it at once)"),
        ("runs", runs_cmd, "a task's recent runs"),
    ):
        c = sub.add_parser(name, help=text)
        c.add_argument("id", type=id_argument("a task"), help="task id (see `luna schedule list`)")
        c.add_argument("--json", action="store_true", help="print JSON")
        c.set_defaults(handler=handler)


@contextlib.asynccontextmanager
async def _schedules(cfg: Config) -> AsyncIterator[Any]:
    """``open_schedules`` with the refusals worded for the command line."""
    try:
        async with open_schedules(cfg) as api:
            yield api
    except NoSuchTaskError as e:
        raise ScheduleError(f"there is no task #{e.task_id} (see `luna schedule list`)") from None


def _print_task(task: Task, as_json: bool, verb: str = "") -> None:
    if as_json:
        print(terminal_json(task_json(task)))
    else:
        print(neutralize(f"{verb}{task_line(task)}"))


async def list_cmd(args: argparse.Namespace, cfg: Config) -> int:
    async with _schedules(cfg) as api:
        tasks = await api.list(Requester.owner(), include_finished=args.all, limit=10_000)
    for task in tasks:
        _print_task(task, args.json)
    if not tasks and not args.json:
        print("no scheduled tasks" + ("" if args.all else " (--all shows finished ones)"))
    return 0


async def add_cmd(args: argparse.Namespace, cfg: Config) -> int:
    request = TaskRequest(
        clean_text(args.text),  # bytes that are not UTF-8 (surrogateescape) shown as U+FFFD
        "prompt" if args.prompt else "reminder",
        at=args.at,
        after=args.after,
        cron=args.cron,
        every=args.every,
    )
    who = Requester.owner("cli", owner_target(cfg, args.to))
    async with _schedules(cfg) as api:
        task = await api.add(request, who)
    _print_task(task, args.json, "scheduled ")
    return 0


async def cancel_cmd(args: argparse.Namespace, cfg: Config) -> int:
    async with _schedules(cfg) as api:
        task = await api.cancel(args.id, Requester.owner())
    _print_task(task, args.json, "cancelled ")
    return 0


async def run_now_cmd(args: argparse.Namespace, cfg: Config) -> int:
    async with _schedules(cfg) as api:
        task = await api.run_now(args.id, Requester.owner())
    _print_task(task, args.json, "due now: ")
    if not args.json:
        print(
            f"A running Luna fires it within {cfg.scheduler.poll_interval:g} s "
            "(scheduler.poll_interval); otherwise it runs when Luna next starts."
        )
    return 0


async def runs_cmd(args: argparse.Namespace, cfg: Config) -> int:
    async with _schedules(cfg) as api:
        runs = await api.runs(args.id, Requester.owner(), limit=50)
    for run in runs:
        if args.json:
            print(terminal_json(run.to_json()))
        else:
            detail = run.error or (run.output or "").strip().replace("\n", " ")[:100]
            when = f"{run.started_at:%Y-%m-%d %H:%M} UTC"
            print(neutralize(f"run {run.id} {when} {run.status} {detail}"))
    if not runs and not args.json:
        print(f"task #{args.id} has not run yet")
    return 0
