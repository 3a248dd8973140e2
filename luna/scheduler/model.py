"""The scheduler's data shapes: tasks, runs, deliveries, who asks and where answers go.

Invariants:
- Every instant is an aware UTC ``datetime`` in memory and UTC ISO 8601 text with
  milliseconds in the database (:func:`to_db` / :func:`from_db`, the one conversion), so text
  order is time order and an index finds the next due task.
- A schedule keeps the IANA zone it was given in; local times are derived from it on demand.
- ``to_json`` shapes are what ``luna schedule … --json`` prints and the web API returns.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from luna.errors import ScheduleError

if TYPE_CHECKING:
    from luna.config import Config

TaskKind = Literal["reminder", "prompt", "heartbeat"]
ScheduleKind = Literal["once", "cron", "interval"]
TaskState = Literal["active", "running", "done", "missed", "failed", "cancelled"]
RunStatus = Literal[
    "running", "ok", "silent", "failed", "interrupted", "missed", "cancelled", "refused"
]
DeliveryKind = Literal["reminder", "result", "notice"]

LIVE_STATES: tuple[TaskState, ...] = ("active", "running")
OWNER = "owner"  # the creator id of everything the owner schedules, from any front-end


def to_db(when: dt.datetime) -> str:
    """An aware datetime as the UTC text the database stores."""
    return when.astimezone(dt.UTC).isoformat(timespec="milliseconds")


def from_db(text: str | None) -> dt.datetime | None:
    return None if text is None else dt.datetime.fromisoformat(text).astimezone(dt.UTC)


@dataclass(frozen=True)
class Target:
    """Where a task's results are shown: a front-end and its own address there.

    Discord: ``{"channel_id", "user_id", "is_dm"}`` (ids as text); the REPL and the web need
    none.
    """

    frontend: str
    address: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"frontend": self.frontend, **self.address}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Target:
        rest = {k: v for k, v in data.items() if k != "frontend"}
        return cls(str(data.get("frontend") or "repl"), rest)

    def dumps(self) -> str:
        return json.dumps(self.address, sort_keys=True)


@dataclass(frozen=True)
class Schedule:
    """When a task runs: once at ``spec`` (UTC ISO), on a cron ``spec``, or every ``spec``
    seconds from ``anchor``; cron and whole-day intervals are read in ``zone``."""

    kind: ScheduleKind
    spec: str
    zone: str
    anchor: dt.datetime | None = None


@dataclass(frozen=True)
class Task:
    id: int
    kind: TaskKind
    text: str
    schedule: Schedule
    state: TaskState
    next_run_at: dt.datetime | None
    creator: str
    scope: str
    target: Target
    origin_session: str | None
    created_at: dt.datetime
    forced: bool = False
    attempt: int = 0
    last_run_at: dt.datetime | None = None
    last_status: str | None = None
    runs: int = 0

    COLUMNS = (
        "id, kind, text, schedule_kind, spec, anchor, timezone, state, next_run_at, creator, "
        "scope, frontend, target, origin_session, created_at, forced, attempt, last_run_at, "
        "last_status, runs"
    )

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Task:
        (id_, kind, text, skind, spec, anchor, zone, state, next_run, creator, scope, frontend,
         target, origin, created, forced, attempt, last_run, last_status, runs) = row  # fmt: skip
        return cls(
            id=int(id_),
            kind=kind,
            text=text,
            schedule=Schedule(skind, spec, zone, from_db(anchor)),
            state=state,
            next_run_at=from_db(next_run),
            creator=creator,
            scope=scope,
            target=Target(frontend, json.loads(target or "{}")),
            origin_session=origin,
            created_at=from_db(created) or dt.datetime.now(dt.UTC),
            forced=bool(forced),
            attempt=int(attempt),
            last_run_at=from_db(last_run),
            last_status=last_status,
            runs=int(runs),
        )

    @property
    def is_recurring(self) -> bool:
        return self.schedule.kind != "once"

    @property
    def label(self) -> str:
        """A short name for notices: the first line of the text, cut to 60 characters."""
        first = self.text.strip().splitlines()[0] if self.text.strip() else ""
        return first if len(first) <= 60 else first[:59] + "…"


@dataclass(frozen=True)
class Run:
    id: int
    task_id: int
    due_at: dt.datetime
    started_at: dt.datetime
    finished_at: dt.datetime | None
    attempt: int
    status: RunStatus
    session_id: str | None
    output: str | None
    error: str | None

    COLUMNS = (
        "id, task_id, due_at, started_at, finished_at, attempt, status, session_id, output, error"
    )

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Run:
        id_, task_id, due, started, finished, attempt, status, session, output, error = row
        return cls(
            int(id_),
            int(task_id),
            from_db(due) or dt.datetime.now(dt.UTC),
            from_db(started) or dt.datetime.now(dt.UTC),
            from_db(finished),
            int(attempt),
            status,
            session,
            output,
            error,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "task_id": self.task_id,
            "due_at": to_db(self.due_at),
            "started_at": to_db(self.started_at),
            "finished_at": to_db(self.finished_at) if self.finished_at else None,
            "attempt": self.attempt,
            "status": self.status,
            "session_id": self.session_id,
            "output": self.output,
            "error": self.error,
        }


@dataclass(frozen=True)
class NewDelivery:
    """A delivery to be written (inside the transaction of the run that produced it)."""

    kind: DeliveryKind
    target: Target
    text: str
    session_id: str | None  # the asking session, where the text is also noted
    scope: str
    task_id: int | None = None
    run_id: int | None = None


@dataclass(frozen=True)
class Delivery:
    id: int
    task_id: int | None
    run_id: int | None
    kind: DeliveryKind
    target: Target
    session_id: str | None
    scope: str
    text: str
    created_at: dt.datetime
    noted: bool
    attempts: int

    COLUMNS = (
        "id, task_id, run_id, kind, frontend, target, session_id, scope, text, created_at, "
        "noted_at, attempts"
    )

    @classmethod
    def from_row(cls, row: tuple[Any, ...]) -> Delivery:
        id_, task, run, kind, frontend, target, session, scope, text, created, noted, n = row
        return cls(
            int(id_),
            task,
            run,
            kind,
            Target(frontend, json.loads(target or "{}")),
            session,
            scope,
            text,
            from_db(created) or dt.datetime.now(dt.UTC),
            noted is not None,
            int(n),
        )


@dataclass(frozen=True)
class Requester:
    """Who asks for a scheduler operation, from where, and where answers should go."""

    user_id: str  # "owner", or a Discord user id
    scope: str
    frontend: str
    session_id: str | None = None
    target: Target | None = None

    @classmethod
    def owner(
        cls, frontend: str = "cli", target: Target | None = None, session_id: str | None = None
    ) -> Requester:
        return cls(OWNER, "owner", frontend, session_id, target)


@dataclass(frozen=True)
class TaskRequest:
    """What to schedule: the text, its kind, and exactly one of the four ways to say when."""

    text: str
    kind: Literal["reminder", "prompt"] = "reminder"
    at: str | None = None  # a local time "YYYY-MM-DD HH:MM" (or ISO with an offset)
    after: str | None = None  # a delay: "20m", "1h30m", "2d"
    cron: str | None = None  # five fields, read in the user's zone
    every: str | None = None  # an interval: "30m", "6h", "1d"


def owner_target(cfg: Config, prefer: str = "auto") -> Target:
    """Where the owner hears from Luna when no conversation is named: a Discord DM when a bot
    token and ``discord.owner_id`` are set (or ``prefer == "discord"``), else a Telegram chat
    with the owner when ``TELEGRAM_TOKEN`` and ``telegram.owner_id`` are (or ``prefer ==
    "telegram"``), else the owner's direct room on Matrix when a homeserver, a login and
    ``matrix.owner`` are (or ``prefer == "matrix"``), else the terminal."""
    if prefer == "repl":
        return Target("repl")
    m = cfg.matrix
    has_matrix = bool(m.homeserver and (m.access_token or m.password) and m.owner)
    has_telegram = bool(cfg.telegram.token) and bool(cfg.telegram.owner_id)
    if prefer == "matrix" or (
        prefer == "auto" and has_matrix and not cfg.discord.token and not cfg.telegram.token
    ):
        if not m.owner:
            raise ScheduleError("delivering to Matrix needs matrix.owner")
        return Target("matrix", {"user_id": m.owner, "is_dm": True})
    if prefer == "telegram" or (prefer == "auto" and has_telegram and not cfg.discord.token):
        if not cfg.telegram.owner_id:
            raise ScheduleError("delivering to Telegram needs telegram.owner_id")
        owner = str(cfg.telegram.owner_id)
        return Target("telegram", {"chat_id": owner, "user_id": f"telegram:{owner}"})
    has_discord = bool(cfg.discord.token) and bool(cfg.discord.owner_id)
    if prefer == "discord" or (prefer == "auto" and has_discord):
        if not cfg.discord.owner_id:
            raise ScheduleError("delivering to Discord needs discord.owner_id")
        return Target("discord", {"user_id": str(cfg.discord.owner_id), "is_dm": True})
    return Target("repl")
