"""Scheduled tasks from the web: the API over the scheduler's own code path, and results
delivered to the page (held while no page is open), against the app's real scheduler."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.web.sse import event_stream
from tests.history import prompt_view


async def test_a_reminder_asked_in_a_web_session_is_delivered_to_that_session(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    luna = await web_luna(scheduler=True)
    llm_server.script(
        Reply(
            tool_calls=[{"name": "schedule_task", "arguments": {"text": "stretch", "after": "20m"}}]
        ),
        Reply(content="I will remind you."),
    )
    async with luna.client() as client, event_stream(client) as events:
        resp = await client.post(
            "/api/sessions/web-rem/messages", json={"text": "remind me in 20m"}
        )
        turn = resp.json()["turn_id"]
        await events.wait_for(lambda e: e.get("turn_id") == turn and e["type"] == "done")
        (task,) = (await client.get("/api/schedules")).json()["tasks"]
        assert task["text"] == "stretch" and task["target"] == {
            "frontend": "web",
            "session_id": "web-rem",
        }
        luna.scheduler.clock.advance(20 * 60)
        await luna.scheduler.tick_once()
        shown = await events.wait_for(lambda e: e["type"] == "delivery")
        assert shown["session_id"] == "web-rem" and "stretch" in shown["text"]
    _, history = await prompt_view(luna.memory, "web-rem")
    assert "stretch" in history[-1]["content"] and history[-1]["role"] == "assistant"


async def test_schedules_api_add_list_get_cancel_and_run_now(
    web_luna: Callable[..., Any],
) -> None:
    luna = await web_luna(scheduler=True)
    async with luna.client() as client:
        bad = await client.post("/api/schedules", json={"text": "x", "after": "soon"})
        assert bad.status_code == 400 and bad.json()["error"]
        two = await client.post("/api/schedules", json={"text": "a", "after": "1h", "every": "1d"})
        assert two.status_code == 400
        made = await client.post("/api/schedules", json={"text": "water the plants", "every": "1d"})
        assert made.status_code == 201, made.text
        task = made.json()
        assert task["state"] == "active" and task["schedule_kind"] == "interval"
        other = (
            await client.post("/api/schedules", json={"text": "call mum", "after": "2h"})
        ).json()
        listed = [t["id"] for t in (await client.get("/api/schedules")).json()["tasks"]]
        assert set(listed) == {task["id"], other["id"]}
        cancelled = (await client.post(f"/api/schedules/{other['id']}/cancel")).json()
        assert cancelled["state"] == "cancelled"
        assert [t["id"] for t in (await client.get("/api/schedules")).json()["tasks"]] == [
            task["id"]
        ]
        finished = (await client.get("/api/schedules", params={"finished": 1})).json()["tasks"]
        assert {t["id"] for t in finished} == {task["id"], other["id"]}
        await client.post(f"/api/schedules/{task['id']}/run")
        # No page is open: the result is held, and shown when one connects.
        await luna.scheduler.tick_once()
        detail = (await client.get(f"/api/schedules/{task['id']}")).json()
        assert detail["runs"] == 1 and detail["recent_runs"][0]["status"] in ("ok", "delivered")
        async with event_stream(client) as events:
            shown = await events.wait_for(lambda e: e["type"] == "delivery")
            assert "water the plants" in shown["text"]
        unknown = await client.get("/api/schedules/9999")
        assert unknown.status_code == 400


async def test_schedules_say_when_the_scheduler_is_off(web_luna: Callable[..., Any]) -> None:
    luna = await web_luna()
    async with luna.client() as client:
        resp = await client.get("/api/schedules")
        assert resp.status_code == 404 and "scheduler is off" in resp.json()["error"]
