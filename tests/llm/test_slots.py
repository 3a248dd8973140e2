"""Slot pinning: each session keeps a llama-server slot, background work keeps off them."""

from __future__ import annotations

from collections.abc import Callable

from luna.config import Config
from luna.llm import LLMClient
from luna.llm.slots import SlotPlan
from tests.fakes.llm_server import FakeLLMServer

USER = [{"role": "user", "content": "hi"}]


def test_slots_sessions_keep_theirs_and_the_least_recent_gives_way() -> None:
    plan = SlotPlan(3)  # slots 0 and 1 for sessions, 2 for background
    assert [plan.slot("a"), plan.slot("b"), plan.slot(None)] == [0, 1, 2]
    assert plan.slot("a") == 0 and plan.slot("b") == 1  # sticky
    assert plan.slot("c") == 0  # a was used least recently: it gives way
    assert plan.slot("b") == 1 and plan.slot("a") == 0  # a comes back, c was older than b
    assert SlotPlan(1).slot("a") is None and SlotPlan(1).slot(None) is None


async def test_slots_the_client_pins_sessions_and_background_work(
    luna_config: Callable[..., Config], llm_server: FakeLLMServer
) -> None:
    llm_server.total_slots = 3
    client = LLMClient(luna_config().llm)
    try:
        await client.stream(USER, lane="session-a")
        await client.stream(USER, lane="session-b")
        await client.chat(USER)  # the librarian, an extraction, a sub-agent
        await client.stream(USER, lane="session-a")
    finally:
        await client.close()
    assert [r["id_slot"] for r in llm_server.requests] == [0, 1, 2, 0]


async def test_slots_are_not_pinned_when_turned_off_or_single(
    luna_config: Callable[..., Config], llm_server: FakeLLMServer
) -> None:
    llm_server.total_slots = 3
    off = LLMClient(luna_config({"llm": {"pin_slots": False}}).llm)
    try:
        await off.stream(USER, lane="a")
    finally:
        await off.close()
    llm_server.total_slots = 1
    single = LLMClient(luna_config().llm)
    try:
        await single.stream(USER, lane="a")
    finally:
        await single.close()
    assert ["id_slot" in r for r in llm_server.requests] == [False, False]
