"""Scheduled tasks over HTTP, and scheduled results shown on the page.

Job: JSON handlers over ``luna.scheduler.api.Schedules`` (the code path ``luna schedule`` and
the model's tools use), acting as the owner from the web; and :func:`delivery_sink`, the
``deliver`` function the web registers with the scheduler's ``DeliveryRouter``.

Invariants:
- Every call goes through ``Schedules`` with ``Requester.owner(frontend="web")``; its
  ScheduleError (one line) becomes a 400, an unknown id included (its message says so).
- A task added from the page is delivered back to the web, to the session it names.
- A delivery is shown only when a page is open (an event-stream subscriber); otherwise the
  sink answers False and the router holds it (stored first, shown when a page connects and
  the router flushes again).
- With the scheduler off (``[scheduler] enabled = false``) these endpoints answer 404 saying so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from luna.errors import ScheduleError
from luna.frontends.web.events import EventHub
from luna.frontends.web.inputs import ApiError, error, json_body, path_id
from luna.frontends.web.state import state
from luna.frontends.web.turns import valid_session_id
from luna.scheduler.api import task_json
from luna.scheduler.delivery import DeliverFn
from luna.scheduler.model import Delivery, Requester, Target, TaskRequest

if TYPE_CHECKING:  # made by app when [scheduler] is on
    from luna.scheduler.service import SchedulerService

WHEN_KEYS = ("at", "after", "cron", "every")


def _service(request: web.Request) -> SchedulerService:
    scheduler = state(request).scheduler
    if scheduler is None:
        raise ApiError(404, "the scheduler is off ([scheduler] enabled = false)")
    return scheduler


def _owner(session_id: str | None = None) -> Requester:
    address = {"session_id": session_id} if session_id else {}
    return Requester.owner(frontend="web", target=Target("web", address), session_id=session_id)


def _task_id(request: web.Request) -> int:
    return path_id(request, "task_id", "a task")


async def list_tasks(request: web.Request) -> web.Response:
    """``GET /api/schedules?finished=1``: every task (the owner sees all), newest plans first."""
    api = _service(request).api
    finished = request.query.get("finished") in ("1", "true", "yes")
    tasks = await api.list(_owner(), include_finished=finished, limit=500)
    return web.json_response({"tasks": [task_json(t) for t in tasks]})


async def add_task(request: web.Request) -> web.Response:
    """``POST /api/schedules`` ``{"text", "kind"?, one of "at"/"after"/"cron"/"every",
    "session_id"?}`` (as ``luna schedule add``)."""
    api = _service(request).api
    body = await json_body(request)
    text, kind = body.get("text"), body.get("kind", "reminder")
    session = body.get("session_id")
    if not isinstance(text, str) or kind not in ("reminder", "prompt"):
        return error(400, "'text' is a string and 'kind' is \"reminder\" or \"prompt\"")
    if session is not None and (not isinstance(session, str) or not valid_session_id(session)):
        return error(400, "invalid session_id")
    when = {k: body[k] for k in WHEN_KEYS if body.get(k) not in (None, "")}
    if not all(isinstance(v, str) for v in when.values()):
        return error(400, 'at/after/cron/every are strings, e.g. after = "20m"')
    try:
        task = await api.add(TaskRequest(text=text, kind=kind, **when), _owner(session))
    except ScheduleError as e:
        return error(400, str(e))
    return web.json_response(task_json(task), status=201)


async def get_task(request: web.Request) -> web.Response:
    """``GET /api/schedules/{id}``: the task and its latest runs."""
    api = _service(request).api
    task_id = _task_id(request)
    try:
        task = await api.get(task_id, _owner())
        runs = await api.runs(task_id, _owner(), limit=20)
    except ScheduleError as e:
        return error(400, str(e))
    return web.json_response({**task_json(task), "recent_runs": [r.to_json() for r in runs]})


def _change(op: str) -> Callable[[web.Request], Awaitable[web.Response]]:
    async def handler(request: web.Request) -> web.Response:
        api = _service(request).api
        call = api.cancel if op == "cancel" else api.run_now
        try:
            task = await call(_task_id(request), _owner())
        except ScheduleError as e:
            return error(400, str(e))
        return web.json_response(task_json(task))

    handler.__doc__ = f"``POST /api/schedules/{{id}}/{op}``"
    return handler


def delivery_sink(hub: EventHub) -> DeliverFn:
    """The web's ``deliver`` for the scheduler's router (see the module invariants)."""

    async def deliver(delivery: Delivery) -> bool:
        if hub.subscribers == 0:
            return False
        session = delivery.target.address.get("session_id") or delivery.session_id
        hub.publish(
            {
                "type": "delivery",
                "session_id": session,
                "task_id": delivery.task_id,
                "kind": delivery.kind,
                "text": delivery.text,
            }
        )
        return True

    return deliver


def routes() -> list[web.RouteDef]:
    return [
        web.get("/api/schedules", list_tasks),
        web.post("/api/schedules", add_task),
        web.get("/api/schedules/{task_id}", get_task),
        web.post("/api/schedules/{task_id}/cancel", _change("cancel")),
        web.post("/api/schedules/{task_id}/run", _change("run")),
    ]
