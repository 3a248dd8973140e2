"""The public API and the tools: rights, caps, text, and what the model sees."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from luna.errors import ScheduleError
from luna.memory.storage.migrations import MIGRATIONS
from luna.memory.storage.store import Store
from luna.messages import InboundMessage, TurnDone
from luna.scheduler.model import Requester, Target
from luna.scheduler.store import TaskStore
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.scheduler.conftest import OWNER_REPL

FRIEND = Requester("222", "user:222", "discord", "dm-222",
                   Target("discord", {"user_id": "222", "is_dm": True}))  # fmt: skip
STRANGER = Requester("333", "user:333", "discord", "dm-333",
                     Target("discord", {"user_id": "333", "is_dm": True}))  # fmt: skip
DISCORD = {"owner_id": 111, "allowed_users": [222]}


async def test_api_owner_sees_all_others_only_their_own(make_sched: Callable[..., Any]) -> None:
    s = await make_sched(discord=DISCORD)
    mine = await s.add("owner's", at="2026-12-01 21:00")
    theirs = await s.add("friend's", who=FRIEND, kind="prompt", every="1d")
    assert [t.id for t in await s.api.list(OWNER_REPL)] == [mine.id, theirs.id]
    assert [t.id for t in await s.api.list(FRIEND)] == [theirs.id]
    with pytest.raises(ScheduleError, match=f"there is no task #{mine.id}"):
        await s.api.cancel(mine.id, FRIEND)
    owner_on_discord = Requester("111", "owner", "discord", "dm-111", Target("discord", {}))
    assert len(await s.api.list(owner_on_discord)) == 2  # one owner, every front-end
    await s.api.cancel(theirs.id, OWNER_REPL)
    assert await s.api.list(FRIEND) == []
    assert [t.state for t in await s.api.list(FRIEND, include_finished=True)] == ["cancelled"]
    with pytest.raises(ScheduleError, match="is already cancelled"):
        await s.api.cancel(theirs.id, OWNER_REPL)
    with pytest.raises(ScheduleError, match="only an active task can run now"):
        await s.api.run_now(theirs.id, OWNER_REPL)


async def test_api_strangers_get_reminders_at_most_and_everyone_a_cap(
    make_sched: Callable[..., Any],
) -> None:
    closed = await make_sched(discord=DISCORD)
    with pytest.raises(ScheduleError, match="only the owner and allowed users can schedule"):
        await closed.add("hi", who=STRANGER, after="1h")
    s = await make_sched(
        {"strangers": "reminders", "max_tasks_per_stranger": 1, "max_tasks_per_user": 2},
        discord=DISCORD,
    )
    with pytest.raises(ScheduleError, match="can schedule prompts; you can set plain reminders"):
        await s.add("run bash", who=STRANGER, kind="prompt", after="1h")
    await s.add("drink water", who=STRANGER, after="1h")
    with pytest.raises(ScheduleError, match="you have 1 active tasks, the most allowed"):
        await s.add("and again", who=STRANGER, after="2h")
    await s.add("a", who=FRIEND, after="1h")
    await s.add("b", who=FRIEND, after="1h")
    with pytest.raises(ScheduleError, match="you have 2 active tasks"):
        await s.add("c", who=FRIEND, after="1h")


async def test_api_text_is_kept_in_any_script_controls_removed_length_bounded(
    make_sched: Callable[..., Any],
) -> None:
    s = await make_sched({"max_text_chars": 40})
    task = await s.add("  Zahnarzt 🦷 anrufen — 歯医者\x1b[31m\x00 ", at="2026-12-02 09:00")
    assert task.text == "Zahnarzt 🦷 anrufen — 歯医者[31m"
    with pytest.raises(ScheduleError, match="the text is 41 characters; the most is 40"):
        await s.add("x" * 41, after="1h")
    with pytest.raises(ScheduleError, match="the text is empty"):
        await s.add(" \x07 ", after="1h")


async def test_api_heartbeat_is_configured_not_cancelled(make_sched: Callable[..., Any]) -> None:
    s = await make_sched({"heartbeat": True})
    await s.tick()
    hb = s.service.store.heartbeat()
    assert hb is not None and hb.schedule.spec == "0 9 * * *"
    with pytest.raises(ScheduleError, match=r"set in config.toml \(scheduler.heartbeat\)"):
        await s.api.cancel(hb.id, OWNER_REPL)
    off = await make_sched({"heartbeat": False})
    s.service.lease.release()
    await off.tick()
    assert off.service.store.heartbeat() is None  # turned off in the config: cancelled


async def test_tool_schedule_task_from_a_turn_files_it_where_it_was_asked(
    make_sched: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    s = await make_sched()
    s.attach()
    llm_server.script(
        Reply(tool_calls=[{"name": "schedule_task",
                           "arguments": {"text": "call the dentist", "at": "2026-12-02 09:00"}}]),
        Reply(content="Done: tomorrow at nine."),
        Reply(tool_calls=[{"name": "schedule_task",
                           "arguments": {"text": "x", "cron": "* * * * * *"}}]),
        Reply(content="That cannot work."),
    )  # fmt: skip
    msg = InboundMessage("repl-asking", "remind me tomorrow at nine to call the dentist")
    events = [e async for e in s.agent.run_turn(msg)]
    assert isinstance(events[-1], TurnDone)
    first_tool = [m for m in llm_server.requests[1]["messages"] if m["role"] == "tool"][0]
    assert "Scheduled #1 reminder [active] next 2026-12-02 09:00 CET" in first_tool["content"]
    context = llm_server.requests[0]["messages"][-1]["content"]
    assert "Current time: 2026-" in context and "(CET)" in context  # in agent.timezone
    (task,) = await s.api.list(OWNER_REPL)
    assert (task.creator, task.target, task.origin_session) == ("owner", Target("repl"),
                                                                "repl-asking")  # fmt: skip
    [e async for e in s.agent.run_turn(InboundMessage("repl-asking", "every second please"))]
    refusal = [m for m in llm_server.requests[3]["messages"] if m["role"] == "tool"][-1]
    assert "seconds are not supported" in refusal["content"]
    await s.tick(25 * 3600)  # 09:00 on the 2nd
    assert s.texts() == ["⏰ Reminder: call the dentist"]


async def test_delivery_is_held_until_a_frontend_shows_it_and_retried_when_it_fails(
    make_sched: Callable[..., Any],
) -> None:
    s = await make_sched()
    await s.add("one", after="1h")
    await s.tick(3600)  # no front-end registered: held
    assert len(await _pending(s)) == 1
    s.accept = False
    s.attach()
    await s.tick()
    assert s.shown == [] and len(await _pending(s)) == 1  # it said "not now": kept
    s.accept = True
    await s.tick()
    assert s.texts() == ["⏰ Reminder: one"] and await _pending(s) == []
    _, history = await _history(s, "repl-asking")
    assert [m["content"] for m in history] == ["⏰ Reminder: one"]  # noted once, not per try


async def test_delivery_claim_of_a_dead_process_is_taken_over(
    make_sched: Callable[..., Any],
) -> None:
    s = await make_sched()
    await s.add("two", after="1h")
    await s.tick(3600)
    store = s.service.store
    (gone,) = store.claim_deliveries("repl", "dead-process", s.clock.now(), stale_s=300)
    s.attach()
    await s.tick(299)
    assert s.shown == []  # another process may still be showing it
    await s.tick(2)
    assert [d.id for d in s.shown] == [gone.id]


async def _pending(s: Any) -> list[Any]:
    import asyncio

    return await asyncio.to_thread(s.service.store.pending_deliveries)


async def _history(s: Any, session: str) -> Any:
    from tests.history import prompt_view

    return await prompt_view(s.memory, session)


def test_migration_m006_on_a_blank_and_an_old_database(tmp_path: Path) -> None:
    blank = Store(tmp_path / "blank.db", load_vec=False)
    assert "m006_scheduler" in blank.migrate()
    old = Store(tmp_path / "old.db", load_vec=False)
    before = [m for m in MIGRATIONS if m[0] != "m006_scheduler"]
    old.migrate(before)
    with old.transaction() as conn:
        conn.execute(
            "INSERT INTO sessions (id, scope, created_at) VALUES ('s', 'owner', '2026-01-01')"
        )
    assert old.migrate() == ["m006_scheduler"]
    assert old.query("SELECT count(*) FROM sessions") == [(1,)]
    for store in (blank, old):
        tasks = TaskStore(store)
        assert tasks.next_due_at() is None and tasks.list_tasks() == []
        plan = store.query(
            "EXPLAIN QUERY PLAN SELECT next_run_at FROM scheduled_tasks "
            "WHERE state = 'active' AND next_run_at IS NOT NULL ORDER BY next_run_at LIMIT 1"
        )
        assert "scheduled_tasks_due" in json.dumps(plan)  # the O(log n) index is used
        store.close()


async def test_heartbeat_that_cannot_work_stops_luna_in_one_line(
    make_sched: Callable[..., Any],
) -> None:
    from luna.errors import ConfigError

    bad_cron = await make_sched({"heartbeat": True, "heartbeat_cron": "* * * * *"})
    with pytest.raises(ConfigError, match=r"scheduler.heartbeat_cron: cron .* fires every 1m"):
        await bad_cron.service.start()
    no_owner = await make_sched({"heartbeat": True, "heartbeat_to": "discord"})
    with pytest.raises(ConfigError, match="scheduler.heartbeat_to: .* needs discord.owner_id"):
        await no_owner.service.start()


async def test_cancelling_a_running_prompt_stops_its_turn_without_a_notice(
    make_sched: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    import asyncio

    s = await make_sched()
    s.attach()
    task = await s.add("a long job", kind="prompt", after="1h")
    llm_server.script(Reply(content="too late", delay=60))
    s.clock.advance(3600)
    await s.service.tick_once(settle=False)
    await asyncio.to_thread(llm_server.wait_for_requests, 1)
    await s.api.cancel(task.id, OWNER_REPL)
    await s.service.runner.wait_idle()
    await s.tick()
    assert s.shown == []
    assert [r.status for r in await s.api.runs(task.id, OWNER_REPL)] == ["cancelled"]
    assert (await s.api.get(task.id, OWNER_REPL)).state == "cancelled"
