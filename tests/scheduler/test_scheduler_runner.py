"""The tick on a hand-moved clock: firing once, missed periods, retries, interruptions."""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any

from luna.scheduler.model import Requester, Target
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.history import prompt_view
from tests.scheduler.conftest import OWNER_REPL, START

HOUR = 3600.0


async def test_runner_reminder_fires_once_at_its_time_and_is_noted_where_asked(
    make_sched: Callable[..., Any],
) -> None:
    s = await make_sched()
    s.attach("repl")
    task = await s.add("call the dentist 🦷", at="2026-12-01 09:00")
    await s.tick(HOUR - 1)  # 08:59:59
    assert s.shown == []
    await s.tick(1)
    assert s.texts() == ["⏰ Reminder: call the dentist 🦷"]
    for _ in range(3):  # later ticks, and the next day: nothing again
        await s.tick(HOUR * 8)
    assert len(s.shown) == 1
    done = await s.api.get(task.id, OWNER_REPL)
    assert done.state == "done" and done.runs == 1 and done.next_run_at is None
    _, history = await prompt_view(s.memory, "repl-asking")
    assert history == [{"role": "assistant", "content": "⏰ Reminder: call the dentist 🦷"}]


async def test_runner_missed_within_grace_runs_once_older_is_marked_missed_and_told_once(
    make_sched: Callable[..., Any],
) -> None:
    s = await make_sched({"grace": 900})
    s.attach()
    soon = await s.add("stretch", cron="0 9 * * *")  # daily 09:00
    await s.tick(HOUR + 600)  # 10 minutes late, as after a short outage: runs once
    assert s.texts() == ["⏰ Reminder: stretch"]
    # Down for three days: three 09:00 runs missed, far past the grace. One notice, no runs.
    await s.tick(3 * 24 * HOUR)
    assert len(s.shown) == 2
    notice = s.shown[1].text
    assert notice.startswith('⏰ Missed while Luna was not running: task #1 "stretch"')
    assert "and 2 more times" in notice and "Next run 2026-12-05 09:00 CET" in notice
    after = await s.api.get(soon.id, OWNER_REPL)
    assert after.state == "active"
    assert after.next_run_at == dt.datetime(2026, 12, 5, 8, tzinfo=dt.UTC)
    runs = await s.api.runs(soon.id, OWNER_REPL)
    assert [r.status for r in runs] == ["missed", "ok"]
    once = await s.add("renew the passport", at="2026-12-05 07:00")
    await s.tick(2 * 24 * HOUR)
    assert (
        "⏰ Missed while Luna was not running: reminder #2 was due 2026-12-05 07:00 CET: renew "
        "the passport" in s.texts()
    )
    assert (await s.api.get(once.id, OWNER_REPL)).state == "missed"


async def test_runner_prompt_runs_in_its_own_session_and_the_result_reaches_the_asking_one(
    make_sched: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    s = await make_sched()
    s.attach()
    await s.memory.append_message("repl-asking", {"role": "user", "content": "hi"})
    await s.memory.append_message("repl-asking", {"role": "assistant", "content": "hello"})
    task = await s.add("check the inbox folder", kind="prompt", cron="0 9 * * 1-5")
    llm_server.script(Reply(content="Two new mails: the dentist and the bank."))
    await s.tick(HOUR)
    (request,) = llm_server.requests
    sent = request["messages"][-1]["content"]
    assert "[Scheduled task #1, cron 0 9 * * 1-5 (Europe/Berlin)." in sent
    assert "check the inbox folder" in sent
    assert "hello" not in str(request["messages"])  # not the asking session's prompt
    assert s.texts() == [f"🗓️ Task #{task.id}: check the inbox folder\nTwo new mails: the "
                         "dentist and the bank."]  # fmt: skip
    _, asking = await prompt_view(s.memory, "repl-asking")
    assert [m["role"] for m in asking] == ["user", "assistant", "assistant"]
    assert asking[:2] == [{"role": "user", "content": "hi"},
                          {"role": "assistant", "content": "hello"}]  # fmt: skip
    _, own = await prompt_view(s.memory, f"task-{task.id}")
    assert [m["role"] for m in own] == ["user", "assistant"]
    after = await s.api.get(task.id, OWNER_REPL)
    assert after.state == "active" and after.last_status == "ok"
    assert after.next_run_at == dt.datetime(2026, 12, 2, 8, tzinfo=dt.UTC)


async def test_runner_failed_turn_retries_with_backoff_then_fails_with_one_notice(
    make_sched: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    s = await make_sched({"max_retries": 2, "retry_backoff": 60})
    s.attach()
    task = await s.add("summarize my week", kind="prompt", at="2026-12-01 09:00")
    llm_server.default = Reply(status=503, error_body={"error": {"message": "down"}})
    await s.tick(HOUR)
    assert len(llm_server.requests) == 1 and s.shown == []
    assert (await s.api.get(task.id, OWNER_REPL)).attempt == 1
    await s.tick(59)
    assert len(llm_server.requests) == 1  # the backoff is 60 s
    await s.tick(1)
    assert len(llm_server.requests) == 2
    await s.tick(119)
    assert len(llm_server.requests) == 2  # doubled: 120 s
    await s.tick(1)
    assert len(llm_server.requests) == 3
    (notice,) = s.texts()
    assert notice.startswith("⚠️ Task #1 (summarize my week) failed 3 times; last error:")
    assert notice.endswith("It is marked failed.") and "\n" not in notice
    assert (await s.api.get(task.id, OWNER_REPL)).state == "failed"
    await s.tick(HOUR)
    assert len(llm_server.requests) == 3 and len(s.shown) == 1


async def test_runner_interrupted_prompt_is_never_run_again_and_the_person_is_told(
    make_sched: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    first = await make_sched()
    task = await first.add("water the ferns", kind="prompt", cron="0 9 * * *")
    first.clock.advance(HOUR)
    # The claim is committed, then the process dies before the turn ends: the database is
    # left exactly as a crash mid-run leaves it.
    assert await first.service._take_lease()
    report = await asyncio.to_thread(first.service.runner.claim_due, first.clock.now(), 1)
    assert [t.id for t, _ in report.started] == [task.id]
    first.service.lease.release()

    second = await make_sched(start=START + dt.timedelta(hours=1, minutes=5))
    second.attach()
    await second.tick()
    assert llm_server.requests == []  # at most once: not run again
    (notice,) = second.texts()
    assert notice.startswith("⚠️ Task #1 (water the ferns) was interrupted (Luna stopped")
    assert "Next run 2026-12-02 09:00 CET" in notice
    runs = await second.api.runs(task.id, OWNER_REPL)
    assert [r.status for r in runs] == ["interrupted"]
    assert (await second.api.get(task.id, OWNER_REPL)).state == "active"


async def test_runner_ask_tools_are_denied_unattended_and_the_denial_reported(
    make_sched: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    from luna.tools.builtin import schedule
    from tests.frontends.discord.conftest import tools_registry

    def registry_for(cfg: Any) -> Any:
        reg = tools_registry(cfg)  # echo (allow) and launch (ask)
        schedule.register(reg, cfg)
        return reg

    s2 = await make_sched(registry=registry_for)
    s2.attach()
    await s2.add("launch the rocket", kind="prompt", at="2026-12-01 09:00")
    llm_server.script(
        Reply(tool_calls=[{"name": "launch", "arguments": {"target": "rocket"}}]),
        Reply(content="I could not launch it."),
    )
    await s2.tick(HOUR)
    tool_result = [m for m in llm_server.requests[1]["messages"] if m["role"] == "tool"][0]
    assert "needs the owner's approval, and nobody can approve here" in tool_result["content"]
    (text,) = s2.texts()
    assert "I could not launch it." in text
    assert "(Not run: launch: needs approval, and nobody can approve a scheduled run." in text


async def test_runner_heartbeat_is_silent_with_nothing_to_report(
    make_sched: Callable[..., Any], llm_server: FakeLLMServer, tmp_path: Any
) -> None:
    checklist = tmp_path / "HEARTBEAT.md"
    checklist.write_text("- is the backup disk full?\n", encoding="utf-8")
    s = await make_sched(
        {"heartbeat": True, "heartbeat_cron": "0 */6 * * *", "heartbeat_file": str(checklist)}
    )
    s.attach("repl")
    llm_server.script(
        Reply(content="**Nothing to report.**"), Reply(content="The backup disk is 97% full.")
    )
    await s.tick()  # takes the lease: the heartbeat task now exists
    await s.tick(4 * HOUR)  # 12:00 Berlin
    assert len(llm_server.requests) == 1 and s.shown == []
    assert "- is the backup disk full?" in llm_server.requests[0]["messages"][-1]["content"]
    await s.tick(6 * HOUR)
    assert s.texts() == ["💓 Heartbeat\nThe backup disk is 97% full."]
    hb = s.service.store.heartbeat()
    assert hb is not None and hb.target == Target("repl") and hb.last_status == "ok"
    await s.tick(3 * 24 * HOUR)  # a long outage: a missed heartbeat stays silent
    assert len(s.shown) == 1 and len(llm_server.requests) == 2


async def test_runner_rights_are_checked_again_when_a_prompt_runs(
    make_sched: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    friend = Requester("222", "user:222", "discord", "dm-222",
                       Target("discord", {"user_id": "222", "is_dm": True}))  # fmt: skip
    before = await make_sched(discord={"owner_id": 111, "allowed_users": [222]})
    task = await before.add("scan my folder", who=friend, kind="prompt", at="2026-12-01 09:00")
    after = await make_sched(discord={"owner_id": 111, "allowed_users": []})  # friend removed
    after.attach("discord")
    await after.tick(HOUR)
    assert llm_server.requests == []
    (notice,) = after.texts()
    assert notice.startswith("⚠️ Task #1 was not run: only the owner and allowed users")
    assert after.shown[0].target.address == {"user_id": "222", "is_dm": True}
    assert (await after.api.get(task.id, OWNER_REPL)).state == "failed"


async def test_runner_one_scheduler_per_database_and_run_now_and_cancel(
    make_sched: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    a = await make_sched()
    b = await make_sched()
    a.attach()
    b.attach()
    task = await a.add("tea", every="1d")
    await a.tick()
    assert a.service.lease.held and not await b.service._take_lease()
    await a.api.run_now(task.id, OWNER_REPL)
    await b.tick(12 * HOUR)  # b holds no lease: it fires nothing ...
    assert a.shown == b.shown == []
    await a.tick()  # ... a does, once, even though it was forced far past the grace
    assert a.texts() == ["⏰ Reminder: tea"] and b.shown == []
    await a.api.cancel(task.id, OWNER_REPL)
    await a.tick(7 * 24 * HOUR)
    assert len(a.shown) == 1


async def test_runner_loop_fires_when_the_clock_reaches_the_due_time(
    make_sched: Callable[..., Any],
) -> None:
    s = await make_sched()
    arrived = asyncio.Event()

    async def deliver(d: Any) -> bool:
        s.shown.append(d)
        arrived.set()
        return True

    await s.service.start()  # the real loop, sleeping on the manual clock
    s.service.router.register("repl", deliver)
    await s.add("feed the cat", after="2h")
    s.clock.advance(HOUR)
    await asyncio.sleep(0)
    assert not arrived.is_set()
    s.clock.advance(HOUR)
    await asyncio.wait_for(arrived.wait(), 10)
    assert s.texts() == ["⏰ Reminder: feed the cat"]
