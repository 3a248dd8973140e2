"""A description pending when Luna stops is not lost: the next start describes it.

The scripted server sees (``/props`` modalities.vision) with one slot, so the describer waits
for quiet; Luna stops before the quiet comes, and a new Agent over the same database (a
restart) describes the image once ``resume`` has queued it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from luna.agent.describer import MAX_QUEUED
from luna.agent.loop import Agent
from luna.config import Config
from luna.llm import LLMClient
from luna.memory import Memory
from luna.memory.storage import image_notes, session_log
from luna.memory.storage.store import Store
from luna.messages import Attachment, InboundMessage, TurnDone
from tests.fakes.images import HeldImages, png
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.tools import echo_registry


@pytest.fixture
async def start(
    luna_config: Callable[..., Config],
) -> AsyncIterator[Callable[..., Any]]:
    running: list[tuple[Memory, LLMClient, Agent]] = []

    async def make(images: HeldImages, after_idle: float) -> tuple[Agent, Memory]:
        cfg = luna_config({"attachments": {"describe_after_idle": after_idle}})
        memory = Memory(cfg.memory)
        await memory.open(background=False)
        llm = LLMClient(cfg.llm)
        agent = Agent(cfg, llm, memory, echo_registry(cfg), images=images)
        running.append((memory, llm, agent))
        return agent, memory

    yield make
    for memory, llm, agent in running:
        await agent.drain(1.0)
        await llm.close()
        await memory.close()


def _described(server: FakeLLMServer) -> list[dict[str, Any]]:
    return [r for r in server.requests if r["messages"][0]["role"] == "user"]


async def test_describer_resumes_what_a_stop_left_undescribed(
    start: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    llm_server.vision = True
    images = HeldImages()
    photo = images.add(png(64, 48, seed=3), "receipt.png")
    first, memory = await start(images, after_idle=600.0)
    llm_server.script(Reply(content="Kept."))
    events = [
        e async for e in first.run_turn(InboundMessage("s", "keep this", attachments=(photo,)))
    ]
    assert isinstance(events[-1], TurnDone)
    await first.drain(1.0)  # Luna stops while the description waits for quiet
    await memory.close()
    assert _described(llm_server) == []

    llm_server.default = Reply(content="A supermarket receipt.")
    again, memory = await start(images, after_idle=0.2)  # the next start
    again.sight.resume()
    await again.sight.describer.wait_idle()  # type: ignore[union-attr]
    assert len(_described(llm_server)) == 1
    assert await memory.image_descriptions([photo.sha256]) == {
        photo.sha256: "A supermarket receipt."
    }
    assert await memory.undescribed_images(MAX_QUEUED) == []
    # a third start finds nothing left to do
    third, _ = await start(images, after_idle=0.2)
    third.sight.resume()
    await third.sight.describer.wait_idle()  # type: ignore[union-attr]
    assert len(_described(llm_server)) == 1


def test_undescribed_images_are_newest_first_once_each_and_bounded(tmp_path: Path) -> None:
    store = Store(tmp_path / "luna.db")
    store.migrate()
    try:
        shots = [Attachment("image", "image/png", f"{i}.png", 10, f"{i:x}" * 64) for i in range(5)]
        for shot in shots:
            session_log.append_message(
                store, "s", {"role": "user", "content": "", "attachments": [shot.to_json()]}
            )
        doc = Attachment("document", "application/pdf", "a.pdf", 10, "f" * 64)
        again = {"role": "user", "content": "", "attachments": [shots[4].to_json(), doc.to_json()]}
        session_log.append_message(store, "t", again)
        image_notes.set_description(store, shots[3].sha256, "described already", "m")
        newest_first = ["4.png", "2.png", "1.png", "0.png"]  # 3 is described, the PDF no image
        assert [a.name for a in image_notes.undescribed(store, 10)] == newest_first
        assert [a.name for a in image_notes.undescribed(store, 2)] == ["4.png", "2.png"]
    finally:
        store.close()
