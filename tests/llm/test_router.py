"""Several servers: calls go to their role's server, sessions stay put, a dead server is left out.

Role routing and backoff run against scripted servers (they count requests exactly); failover
mid-session runs against two real llama-servers, one of them killed.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from luna import observe
from luna.agent import Agent
from luna.config import Config, build_config
from luna.llm.router import LLMRouter
from luna.llm.vision import IMAGE_WITHHELD
from luna.memory import Memory
from luna.memory.librarian import Librarian
from luna.messages import InboundMessage, TurnDone
from tests.conftest import PREPARED_MODEL
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.tools import echo_registry
from tests.real_llama import ALIAS, RealLlama

USER = [{"role": "user", "content": "hi"}]


def servers_config(tmp_path: Path, servers: list[dict[str, Any]], **llm: Any) -> Config:
    data = {
        "llm": {"servers": servers, "max_retries": 0, "failover_backoff": 30, **llm},
        "memory": {
            "db_path": str(tmp_path / "data" / "luna.db"),
            "compact_every_messages": 4,
            "retain_messages": 2,
            **PREPARED_MODEL,  # the machine's export (a data folder of its own makes one)
        },
        "observe": {"log_dir": str(tmp_path / "data" / "logs"), "console": False},
        "agent": {"workspace": str(tmp_path / "ws")},
        "mcp": {"servers_file": str(tmp_path / "none.json")},
    }
    return build_config(data, {}, base_dir=tmp_path)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_router_background_calls_reach_only_their_own_server(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    with FakeLLMServer() as small:
        cfg = servers_config(
            tmp_path,
            [
                {"name": "big", "endpoint": llm_server.url, "model": llm_server.model},
                {"name": "small", "endpoint": small.url, "model": small.model,
                 "roles": ["background"]},
            ],
        )  # fmt: skip
        router = LLMRouter.from_config(cfg.llm)
        memory = Memory(cfg.memory)
        await memory.open(background=False)
        librarian = Librarian(memory, router.view("background"), cfg)
        agent = Agent(cfg, router.view("chat"), memory, echo_registry(cfg), librarian,
                      background_llm=router.view("background"))  # fmt: skip
        small.default = Reply(content=json.dumps({"summary": "They talked.", "facts": []}))
        try:
            for text in ("one", "two", "three"):
                events = [e async for e in agent.run_turn(InboundMessage("s", text))]
                assert isinstance(events[-1], TurnDone)
            await librarian.wait_idle()
        finally:
            await router.close()
            await memory.close()
        chat = llm_server.requests
        background = small.requests
    assert len(chat) == 3 and all(r.get("tools") for r in chat)  # the turns, on "big"
    assert background and all(r.get("response_format") for r in background)  # the librarian
    assert (await memory_summary(cfg)) == "They talked."


async def test_router_background_work_leaves_sessions_alone_on_a_server_of_its_own(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    # One slot each (the scripted servers' /props): background work on the chat server would
    # take a session's slot; on a server of its own it takes none.
    with FakeLLMServer() as small:
        big = {"name": "big", "endpoint": llm_server.url, "model": llm_server.model}
        apart = LLMRouter.from_config(servers_config(tmp_path, [big, {
            "name": "small", "endpoint": small.url, "model": small.model,
            "roles": ["background"]}]).llm)  # fmt: skip
        shared = LLMRouter.from_config(servers_config(tmp_path, [big]).llm)
        pinned = LLMRouter.from_config(servers_config(tmp_path, [big]).llm)
        try:
            assert await apart.view("background").leaves_sessions_alone()
            assert not await shared.view("background").leaves_sessions_alone()
            llm_server.total_slots = 2  # pinned: the last slot is background work's
            assert await pinned.view("background").leaves_sessions_alone()
        finally:
            for router in (apart, shared, pinned):
                await router.close()


async def memory_summary(cfg: Config) -> str | None:
    memory = Memory(cfg.memory)
    await memory.open(background=False)
    try:
        return (await memory.summary("s"))[0]
    finally:
        await memory.close()


async def test_router_leaves_a_failing_server_out_and_keeps_sessions_where_they_are(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    with FakeLLMServer() as second:
        cfg = servers_config(
            tmp_path,
            [
                {"name": "one", "endpoint": llm_server.url, "model": llm_server.model},
                {"name": "two", "endpoint": second.url, "model": second.model},
            ],
        )
        clock = Clock()
        router = LLMRouter.from_config(cfg.llm)
        router.clock = clock
        chat = router.view("chat")
        observe.setup(cfg.observe.log_dir, console=False)
        try:
            await chat.stream(USER, lane="a")
            llm_server.script(Reply(status=502))  # "one" fails once ...
            second.default = Reply(content="from two")
            resp = await chat.stream(USER, lane="a")
            assert resp.content == "from two"  # ... the session goes on on "two"
            await chat.stream(USER, lane="a")
            assert len(second.requests) == 2  # and stays there
            assert [s["up"] for s in router.status()] == [False, True]
            clock.now += 31  # the backoff is over: "one" is tried again, for new sessions
            assert (await chat.stream(USER, lane="b")).content == "ok"
            assert router.status()[0]["up"] and router.status()[0]["failures"] == 0
        finally:
            await router.close()
            observe.shutdown()
    log = "".join(p.read_text() for p in (tmp_path / "data" / "logs").glob("*.jsonl"))
    events = [json.loads(line) for line in log.splitlines() if '"llm_failover"' in line]
    assert [(e["server"], e["status"]) for e in events] == [("one", "down"), ("one", "back")]
    assert events[0]["backoff_s"] == 30


async def test_router_a_request_error_is_not_a_server_failure(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    with FakeLLMServer() as second:
        cfg = servers_config(
            tmp_path,
            [
                {"name": "one", "endpoint": llm_server.url, "model": llm_server.model},
                {"name": "two", "endpoint": second.url, "model": second.model},
            ],
        )
        router = LLMRouter.from_config(cfg.llm)
        try:
            with pytest.raises(Exception, match="exceeds the available context"):
                await router.view("chat").chat([{"role": "user", "content": "w " * 40_000}])
            assert not second.requests and all(s["up"] for s in router.status())
        finally:
            await router.close()


def test_router_servers_config_is_explicit_and_never_replaced(tmp_path: Path) -> None:
    from luna.config import is_llm_endpoint_explicit

    cfg = servers_config(tmp_path, [{"name": "a", "endpoint": "http://127.0.0.1:9/v1"}])
    assert is_llm_endpoint_explicit(cfg)  # so the embedded demo model never starts for it


async def test_router_two_real_servers_one_killed_mid_session(
    tmp_path: Path, real_llama: Callable[..., RealLlama]
) -> None:
    first = real_llama("stock", fresh_server=True)
    second = real_llama("stock", fresh_server=True)
    cfg = servers_config(
        tmp_path,
        [
            {"name": "first", "endpoint": first.url, "model": ALIAS},
            {"name": "second", "endpoint": second.url, "model": ALIAS},
        ],
        max_tokens=8,
        temperature=0.0,
    )
    router = LLMRouter.from_config(cfg.llm)
    memory = Memory(cfg.memory)
    await memory.open(background=False)
    agent = Agent(cfg, router.view("chat"), memory, echo_registry(cfg))
    agent.tools_enabled = False  # the tiny model cannot call tools; plain turns here
    try:
        before = [e async for e in agent.run_turn(InboundMessage("s", "Count: one, two,"))]
        assert isinstance(before[-1], TurnDone), before[-1]
        assert router.status()[0]["failures"] == 0
        first.proc.kill()  # kill -9 mid-session
        first.proc.wait()
        after = [e async for e in agent.run_turn(InboundMessage("s", "Go on: three,"))]
        assert isinstance(after[-1], TurnDone), after[-1]
        status = {s["name"]: s for s in router.status()}
        assert not status["first"]["up"] and "cannot reach" in status["first"]["last_error"]
        _, records = await memory.prompt_history("s")
        assert [r.role for r in records] == ["user", "assistant", "user", "assistant"]
        assert records[2].content == "Go on: three,"  # nothing lost
    finally:
        first.proc = None
        await router.close()
        await memory.close()


async def test_router_a_session_sees_as_its_server_does_and_failover_never_sends_images(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    # "eyes" can see (--mmproj), "blind" cannot; a session on "eyes" sends images, and when
    # "eyes" fails the same request reaches "blind" with a line in each image's place.
    llm_server.vision = True
    with FakeLLMServer() as blind:
        cfg = servers_config(
            tmp_path,
            [
                {"name": "eyes", "endpoint": llm_server.url, "model": llm_server.model},
                {"name": "blind", "endpoint": blind.url, "model": blind.model},
            ],
        )
        router = LLMRouter.from_config(cfg.llm)
        chat = router.view("chat")
        image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
        ask = [{"role": "user", "content": [image, {"type": "text", "text": "what is it?"}]}]
        try:
            assert await chat.can_see(lane="a")
            await chat.stream(ask, lane="a")
            assert llm_server.requests[-1]["messages"][0]["content"][0] == image
            assert [s["vision"] for s in router.status()] == [True, None]  # blind: not asked
            llm_server.script(Reply(status=502))
            await chat.stream(ask, lane="a")
            sent = blind.requests[-1]["messages"][0]["content"]
            assert sent[0] == {"type": "text", "text": IMAGE_WITHHELD}
            assert not await chat.can_see(lane="a")  # the session now lives on "blind"
            assert [s["vision"] for s in router.status()] == [True, False]
        finally:
            await router.close()
