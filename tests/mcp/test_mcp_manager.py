"""MCPManager against real MCP server subprocesses (stdio) and a loopback streamable-HTTP one."""

from __future__ import annotations

import asyncio
import json
import os

from mcp_helpers import CRASHING, HANGING, PY, child_pids, echo_entry, is_alive, wait_until

from luna.config import Config
from luna.messages import ToolCall
from luna.tools.registry import ToolContext

READY = 60.0  # generous upper bound for wait_ready on a loaded 2-core machine


def ctx() -> ToolContext:
    return ToolContext(
        session_id="s", frontend="cli", user_request="", approver=None, llm=None, run_subagent=None
    )


async def started(make, cfg: Config, environ: dict[str, str] | None = None, **manager_kw):
    manager, registry = make(cfg, environ, **manager_kw)
    await manager.start()
    assert await manager.wait_ready(READY), "servers did not finish starting"
    return manager, registry


async def test_manager_registers_namespaced_tools_and_calls_them(mcp_cfg, mcp_manager) -> None:
    cfg = mcp_cfg({"echo": echo_entry()})
    manager, registry = await started(mcp_manager, cfg)
    (status,) = manager.status()
    assert (status.name, status.state, status.error) == ("echo", "running", None)
    names = registry.names()
    assert {"echo__echo", "echo__add", "echo__crash", "echo__add_tool"} <= set(names)
    assert status.tools == len([n for n in names if n.startswith("echo__")])
    spec = {s["function"]["name"]: s["function"] for s in registry.specs()}["echo__add"]
    assert spec["parameters"]["required"] == ["a"]
    assert spec["parameters"]["properties"]["a"]["type"] == "integer"
    assert "Add two integers" in spec["description"]

    result = await manager.call("echo__add", {"a": 40})
    assert (result.content, result.is_error) == ("42", False)
    # The same call through the registry: validated, shaped and wrapped as untrusted.
    via_registry = await registry.execute(ToolCall("c1", "echo__echo", '{"text": "hi"}'), ctx())
    assert not via_registry.is_error
    assert "hi" in via_registry.content and "<untrusted" in via_registry.content


async def test_manager_reports_errors_and_describes_images(mcp_cfg, mcp_manager) -> None:
    manager, _ = await started(mcp_manager, mcp_cfg({"echo": echo_entry()}))
    failed = await manager.call("echo__fail", {"reason": "because"})
    assert failed.is_error and "because" in failed.content
    picture = await manager.call("echo__picture", {})
    assert not picture.is_error
    assert picture.content.splitlines()[0] == "a tiny picture"
    assert picture.content.splitlines()[1].startswith("[image/png, ")
    unknown = await manager.call("echo__nope", {})
    assert unknown.is_error and "Unknown MCP tool 'echo__nope'" in unknown.content
    assert "echo__echo" in unknown.content  # the known names are listed
    assert unknown.is_error and "Unknown MCP tool" in unknown.content


async def test_manager_published_time_server_runs_offline(mcp_cfg, mcp_manager) -> None:
    cfg = mcp_cfg({"time": {"command": "python", "args": ["-m", "mcp_server_time"]}})
    manager, registry = await started(mcp_manager, cfg)
    (status,) = manager.status()
    assert status.state == "running", status.error
    assert "time__get_current_time" in registry.names()
    result = await manager.call("time__get_current_time", {"timezone": "UTC"})
    assert not result.is_error, result.content
    assert json.loads(result.content)["timezone"] == "UTC"


async def test_manager_streamable_http_server(mcp_cfg, mcp_manager, http_echo_server) -> None:
    cfg = mcp_cfg({"remote": {"url": http_echo_server, "headers": {"X-Test": "${LUNA_HDR}"}}})
    manager, registry = await started(mcp_manager, cfg, dict(os.environ, LUNA_HDR="from-env"))
    (status,) = manager.status()
    assert (status.state, status.transport) == ("running", "http"), status.error
    assert "remote__echo" in registry.names()
    result = await manager.call("remote__echo", {"text": "over http"})
    assert (result.content, result.is_error) == ("over http", False)
    header = await manager.call("remote__header", {"name": "X-Test"})
    assert header.content == "from-env"


async def test_manager_crash_during_a_call_is_told_never_rerun_and_restarts(
    mcp_cfg, mcp_manager
) -> None:
    manager, _ = await started(mcp_manager, mcp_cfg({"echo": echo_entry()}))
    first_pid = int((await manager.call("echo__pid", {})).content)
    crashed = await manager.call("echo__crash", {})
    # The call had been sent: the model is told it may have taken effect, and it is not re-run.
    assert crashed.is_error and "stopped while running echo__crash" in crashed.content
    assert "may or may not have taken effect" in crashed.content
    assert "did not run it again" in crashed.content and "restarting" in crashed.content
    # The restart began in the background: exactly one, not one per retry.
    await wait_until(lambda: manager.status()[0].state == "running", "the restart")
    after = await manager.call("echo__echo", {"text": "back"})
    assert (after.content, after.is_error) == ("back", False)
    second_pid = int((await manager.call("echo__pid", {})).content)
    assert second_pid != first_pid
    assert manager.status()[0].restarts == 1


async def test_manager_call_to_a_server_that_died_idle_is_sent_once_it_is_back(
    mcp_cfg, mcp_manager
) -> None:
    manager, _ = await started(mcp_manager, mcp_cfg({"echo": echo_entry()}))
    pid = int((await manager.call("echo__pid", {})).content)
    os.kill(pid, 9)
    await wait_until(lambda: not is_alive(pid), "the server to die")
    await asyncio.sleep(0.2)  # Luna's reader has seen the end of the pipe
    # Never sent (the session was over before it was written): restarted, then sent once.
    back = await manager.call("echo__echo", {"text": "sent once"})
    assert (back.content, back.is_error) == ("sent once", False)
    assert manager.status()[0].restarts == 1


async def test_manager_call_timeout_is_reported_and_server_stays_usable(
    mcp_cfg, mcp_manager
) -> None:
    manager, _ = await started(mcp_manager, mcp_cfg({"echo": echo_entry(timeout=1)}))
    slow = await manager.call("echo__sleep", {"seconds": 30})
    assert slow.is_error and "timed out after 1 s" in slow.content
    quick = await manager.call("echo__echo", {"text": "still here"})
    assert (quick.content, quick.is_error) == ("still here", False)


async def test_manager_hanging_server_does_not_block_others(mcp_cfg, mcp_manager) -> None:
    # A long start timeout, so "hang" is certainly still starting while echo gets going.
    cfg = mcp_cfg(
        {"hang": {"command": PY, "args": [HANGING]}, "echo": echo_entry()},
        {"mcp": {"start_timeout": 120.0}},
    )
    manager, registry = mcp_manager(cfg)
    await manager.start()  # returns at once
    assert {s.name: s.state for s in manager.status()} == {"hang": "starting", "echo": "starting"}
    await wait_until(lambda: "echo__echo" in registry.names(), "echo's tools")
    result = await manager.call("echo__echo", {"text": "first"})
    assert result.content == "first"
    assert {s.name: s.state for s in manager.status()} == {"hang": "starting", "echo": "running"}
    assert not await manager.wait_ready(0.1)  # hang has not finished starting


async def test_manager_broken_servers_are_reported_and_skipped(mcp_cfg, mcp_manager) -> None:
    cfg = mcp_cfg(
        {
            "hang": {"command": PY, "args": [HANGING]},
            "nocmd": {"command": "/nonexistent/luna-mcp-server"},
            "crashy": {"command": PY, "args": [CRASHING]},
            "bad": {"comand": "typo"},
            "off": {"command": "whatever", "enabled": False},
            "echo": echo_entry(),
        },
        {"mcp": {"start_timeout": 3.0}},
    )
    manager, registry = mcp_manager(cfg)
    await manager.start()
    assert await manager.wait_ready(READY)
    states = {s.name: (s.state, s.error or "") for s in manager.status()}
    assert states["echo"][0] == "running"
    # The limit and the setting that raises it are named.
    assert states["hang"][0] == "failed" and "within 3 s" in states["hang"][1]
    assert "mcp.start_timeout" in states["hang"][1]
    assert states["nocmd"][0] == "failed" and "not found" in states["nocmd"][1]
    assert states["crashy"][0] == "failed" and "giving up immediately" in states["crashy"][1]
    assert states["bad"][0] == "failed" and "comand" in states["bad"][1]
    assert states["off"][0] == "disabled"
    assert not [n for n in registry.names() if n.split("__")[0] in ("hang", "nocmd", "crashy")]
    assert (await manager.call("echo__echo", {"text": "ok"})).content == "ok"
    # The model's later call to the slow server is answered at once (its start goes on in
    # the background), not held for another start_timeout.
    loop = asyncio.get_running_loop()
    began = loop.time()
    later = await registry.execute(ToolCall("c1", "hang__anything", "{}"), ctx())
    assert loop.time() - began < 1.0
    assert later.is_error and "mcp.start_timeout" in later.content
    assert "starting it again in the background" in later.content


async def test_manager_refreshes_tools_on_list_changed(mcp_cfg, mcp_manager) -> None:
    manager, registry = await started(mcp_manager, mcp_cfg({"echo": echo_entry()}))
    assert "echo__fresh_tool" not in registry.names()
    added = await manager.call("echo__add_tool", {"name": "fresh_tool"})
    assert added.content == "added fresh_tool"
    # The refresh runs in the server's runner task, after the notification arrives.
    await wait_until(lambda: "echo__fresh_tool" in registry.names(), "the refreshed tool list")
    result = await manager.call("echo__fresh_tool", {})
    assert result.content == "I am fresh_tool"


async def test_manager_passes_only_named_env_variables(mcp_cfg, mcp_manager) -> None:
    environ = dict(os.environ, DISCORD_TOKEN="discord-secret", LUNA_TEST_VALUE="visible")
    cfg = mcp_cfg({"echo": echo_entry(env={"GIVEN": "${LUNA_TEST_VALUE}"})})
    manager, _ = await started(mcp_manager, cfg, environ)
    assert (await manager.call("echo__env", {"name": "GIVEN"})).content == "visible"
    assert (await manager.call("echo__env", {"name": "DISCORD_TOKEN"})).content == "<unset>"
    assert (await manager.call("echo__env", {"name": "LUNA_TEST_VALUE"})).content == "<unset>"


async def test_manager_starts_stdio_server_in_its_expanded_cwd(
    mcp_cfg, mcp_manager, tmp_path
) -> None:
    folder = tmp_path / "server-home"
    folder.mkdir()
    environ = dict(os.environ, LUNA_TEST_DIR=str(folder))
    cfg = mcp_cfg({"echo": echo_entry(cwd="${LUNA_TEST_DIR}")})
    manager, _ = await started(mcp_manager, cfg, environ)
    assert (await manager.call("echo__cwd", {})).content == str(folder)


async def test_manager_catalog_expose_and_permission(mcp_cfg, mcp_manager) -> None:
    cfg = mcp_cfg({"echo": echo_entry(expose="catalog", permission="ask")})
    manager, registry = await started(mcp_manager, cfg)
    catalog = {i.name: i for i in registry.catalog()}
    assert "echo__echo" in catalog and catalog["echo__echo"].level == "ask"
    assert "echo__echo" not in {s["function"]["name"] for s in registry.specs()}


async def test_manager_stop_leaves_no_server_processes(mcp_cfg, mcp_manager) -> None:
    before = child_pids()
    cfg = mcp_cfg(
        {"a": echo_entry(), "b": echo_entry(), "hang": {"command": PY, "args": [HANGING]}},
        {"mcp": {"start_timeout": 60.0}},
    )
    manager, registry = mcp_manager(cfg)
    await manager.start()
    await wait_until(
        lambda: len([s for s in manager.status() if s.state == "running"]) == 2, "a and b"
    )
    pids = {int((await manager.call(f"{n}__pid", {})).content) for n in ("a", "b")}
    spawned = child_pids() - before
    assert pids <= spawned and len(spawned) >= 3  # a, b and the still-starting hang server
    await manager.stop()
    assert child_pids() & spawned == set()
    assert {s.state for s in manager.status()} == {"stopped"}
    assert not [n for n in registry.names() if "__" in n]
    after_stop = await manager.call("a__echo", {"text": "x"})
    assert after_stop.is_error


async def test_manager_large_result_goes_through_output_pipeline(mcp_cfg, mcp_manager) -> None:
    manager, registry = await started(mcp_manager, mcp_cfg({"echo": echo_entry()}))
    raw = await manager.call("echo__big", {"n": 5000})
    assert raw.content.count("\n") == 4999  # the manager itself returns the full text
    shaped = await registry.execute(ToolCall("c1", "echo__big", '{"n": 5000}'), ctx())
    assert not shaped.is_error
    assert len(shaped.content) < len(raw.content) / 4
    assert "large output of echo__big" in shaped.content
    assert "line 0 of the big output" in shaped.content  # head kept


class ManualClock:
    """A clock that moves only when slept on (or moved by the test); records each wait."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


async def test_manager_failed_restarts_back_off_then_recover(
    mcp_cfg, mcp_manager, tmp_path
) -> None:
    flag = tmp_path / "broken"
    cfg = mcp_cfg({"echo": echo_entry(env={"ECHO_FLAG": str(flag)})})
    clock = ManualClock()
    manager, _ = await started(mcp_manager, cfg, clock=clock, sleep=clock.sleep)
    broken = await manager.call("echo__break_server", {})  # lost in flight: told, not re-run
    assert broken.is_error and "may or may not have taken effect" in broken.content
    # The restart that began at once in the background failed.
    await wait_until(lambda: manager.status()[0].state == "failed", "the failed restart")
    assert clock.slept == []
    for _ in range(3):  # each failed start doubles the wait: 1, 2, 4 s, waited out in the call
        again = await manager.call("echo__echo", {"text": "x"})
        assert again.is_error and "unavailable" in again.content
        assert "broken on purpose" in again.content  # the server's stderr explains it
    assert clock.slept == [1.0, 2.0, 4.0]
    # 8 s is more than a call waits out: it reports at once instead of sleeping.
    soon = await manager.call("echo__echo", {"text": "x"})
    assert soon.is_error and "next restart attempt in 8 s" in soon.content
    assert clock.slept == [1.0, 2.0, 4.0]
    flag.unlink()
    clock.now += 8.0
    healed = await manager.call("echo__echo", {"text": "healed"})
    assert (healed.content, healed.is_error) == ("healed", False)
    assert manager.status()[0].state == "running" and clock.slept == [1.0, 2.0, 4.0]


async def test_manager_concurrent_calls_share_one_session(mcp_cfg, mcp_manager) -> None:
    manager, _ = await started(mcp_manager, mcp_cfg({"echo": echo_entry()}))
    results = await asyncio.gather(
        *(manager.call("echo__sleep", {"seconds": 0.3}) for _ in range(5)),
        *(manager.call("echo__echo", {"text": str(i)}) for i in range(5)),
    )
    assert [r.content for r in results] == ["slept 0.3"] * 5 + [str(i) for i in range(5)]
    assert manager.status()[0].restarts == 0
