"""Images through the agent: the scripted server, a real Memory and a real registry.

A server that can see (``/props`` modalities.vision) gets each image as an ``image_url`` part,
the same bytes in every later request; a text-only one gets a line, and the user is told once
how to enable vision. A tool's image goes into its tool message. Each image gets a description
in the background, and the message is then found by what the image shows.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from luna.agent.loop import Agent
from luna.config import Config
from luna.llm import LLMClient
from luna.llm.vision import IMAGE_WITHHELD, VISION_HINT
from luna.memory import Memory
from luna.memory.librarian import render_transcript
from luna.messages import (
    AgentEvent,
    InboundMessage,
    LoggedMessage,
    TextDelta,
    ToolMedia,
    ToolResult,
    TurnDone,
)
from tests.fakes.images import HeldImages, png
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.tools import echo_registry

PHOTO = png(64, 48, seed=1)


@pytest.fixture
async def setup(
    luna_config: Callable[..., Config], llm_server: FakeLLMServer
) -> AsyncIterator[Callable[..., Any]]:
    opened: list[tuple[Memory, LLMClient, Agent]] = []

    async def make(data: dict[str, Any] | None = None) -> tuple[Agent, HeldImages, Memory]:
        cfg = luna_config(data)
        memory = Memory(cfg.memory)
        await memory.open(background=False)
        llm = LLMClient(cfg.llm)
        registry = echo_registry(cfg)

        @registry.tool(level="allow")
        async def chart() -> ToolResult:
            """Draw a chart."""
            image = ToolMedia("image", "image/png", png(16, 16, seed=9))
            return ToolResult("the chart [image/png, 1 KB]", media=(image,))

        images = HeldImages()
        agent = Agent(cfg, llm, memory, registry, images=images)
        opened.append((memory, llm, agent))
        return agent, images, memory

    yield make
    for memory, llm, agent in opened:
        await agent.drain(1.0)
        await llm.close()
        await memory.close()


async def _turn(agent: Agent, text: str, *attachments: Any) -> list[AgentEvent]:
    msg = InboundMessage("s", text, attachments=attachments)
    events = [e async for e in agent.run_turn(msg)]
    assert isinstance(events[-1], TurnDone), events[-1]
    return events


def _chat(server: FakeLLMServer) -> list[dict[str, Any]]:
    """The chat requests the server got (not the describer's)."""
    return [r for r in server.requests if r["messages"][0]["role"] == "system"]


def _parts(message: dict[str, Any]) -> list[str]:
    content = message["content"]
    return [p["type"] for p in content] if isinstance(content, list) else ["str"]


async def test_images_go_as_parts_to_a_server_that_sees_and_repeat_byte_for_byte(
    setup: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    llm_server.vision = True
    agent, images, _memory = await setup()
    photo = images.add(PHOTO, "receipt.png")
    llm_server.default = Reply(content="A receipt.")
    events = await _turn(agent, "what is this?", photo)
    assert events[-1].reply == "A receipt."  # type: ignore[union-attr]  # no notice
    await _turn(agent, "and the total?")
    first, second = _chat(llm_server)
    sent = first["messages"][-1]
    assert _parts(sent) == ["image_url", "text"]
    assert sent["content"][1]["text"].startswith("what is this?")
    assert sent["content"][0]["image_url"]["url"].startswith("data:image/png;base64,")
    assert json.dumps(second["messages"][1]) == json.dumps(sent)  # byte for byte


async def test_images_a_text_only_server_gets_a_line_and_the_user_is_told_once(
    setup: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    agent, images, memory = await setup()  # the fake reports no vision
    photo = images.add(PHOTO, "receipt.png")
    llm_server.default = Reply(content="I cannot see it.")
    events = await _turn(agent, "what is this?", photo)
    done = events[-1]
    assert isinstance(done, TurnDone) and done.reply.startswith("I cannot see it.\n\n(")
    assert VISION_HINT in done.reply  # shown after the reply ...
    assert any(isinstance(e, TextDelta) and VISION_HINT in e.text for e in events)  # streamed
    again = await _turn(agent, "look again", images.add(png(8, 8, seed=2), "second.png"))
    assert again[-1].reply == "I cannot see it."  # type: ignore[union-attr]  # told once
    first, second = _chat(llm_server)
    line = f"[image receipt.png (image/png, {len(PHOTO) / 1024:.0f} KB): not shown"
    assert line in first["messages"][-1]["content"]
    assert second["messages"][1] == first["messages"][-1]  # the same line later
    assert "image_url" not in json.dumps(second)
    logged = await memory.session_messages("s")
    assert logged[0].attachments == (photo,)
    assert logged[1].content == "I cannot see it."  # ... never stored for the model


async def test_images_a_tools_image_goes_into_its_tool_message(
    setup: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    llm_server.vision = True
    agent, _images, memory = await setup()
    llm_server.script(
        Reply(tool_calls=[{"name": "chart", "arguments": "{}", "id": "c1"}]),
        Reply(content="Here."),
    )
    await _turn(agent, "draw it")
    await _turn(agent, "thanks")
    _call, after_tool, later = _chat(llm_server)
    result = after_tool["messages"][-1]
    assert result["role"] == "tool" and _parts(result) == ["image_url", "text"]
    assert later["messages"][3] == result  # the same (the template never sees key order)
    logged = [m for m in await memory.session_messages("s") if m.role == "tool"]
    assert [a.name for a in logged[0].attachments] == ["chart-1.png"]


async def test_images_are_described_in_the_background_and_found_by_what_they_show(
    setup: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    llm_server.vision = True
    llm_server.total_slots = 2  # a slot for background work: described as the turn ends
    agent, images, memory = await setup()
    photo = images.add(PHOTO, "IMG_2291.png")
    llm_server.script(Reply(content="Sure."))
    llm_server.default = Reply(content="A Migros supermarket receipt totalling 42.50 CHF.")
    await _turn(agent, "keep this", photo)
    await agent.sight.describer.wait_idle()  # type: ignore[union-attr]
    asked = [r for r in llm_server.requests if r["messages"][0]["role"] == "user"]
    assert len(asked) == 1 and _parts(asked[0]["messages"][0]) == ["image_url", "text"]
    assert await memory.image_descriptions([photo.sha256]) == {
        photo.sha256: "A Migros supermarket receipt totalling 42.50 CHF."
    }
    found = await memory.recall("supermarket receipt", session_id="elsewhere")
    assert any("Migros" in item.text for item in found), found
    # The same bytes again: already described, the model is not asked twice.
    await _turn(agent, "again", images.add(PHOTO, "copy.png"))
    await agent.sight.describer.wait_idle()  # type: ignore[union-attr]
    assert len([r for r in llm_server.requests if r["messages"][0]["role"] == "user"]) == 1


async def test_images_on_a_one_slot_server_are_described_only_after_quiet(
    setup: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    # One slot (the fake's /props): a description would take the session's cached prompt, so
    # it waits until no turn has run for attachments.describe_after_idle seconds.
    llm_server.vision = True
    agent, images, memory = await setup({"attachments": {"describe_after_idle": 0.6}})
    photo = images.add(PHOTO, "receipt.png")
    llm_server.default = Reply(content="A receipt.")
    loop = asyncio.get_running_loop()

    def described() -> list[dict[str, Any]]:
        return [r for r in llm_server.requests if r["messages"][0]["role"] == "user"]

    await _turn(agent, "keep this", photo)
    await asyncio.sleep(0.4)
    await _turn(agent, "and this?")  # within the quiet spell: it starts again
    ended = loop.time()
    await asyncio.sleep(0.4)
    assert described() == [], "described while the session was still talking"
    await agent.sight.describer.wait_idle()  # type: ignore[union-attr]
    assert loop.time() - ended >= 0.6 and len(described()) == 1
    assert await memory.image_descriptions([photo.sha256]) == {photo.sha256: "A receipt."}


def test_images_reach_a_compaction_as_their_descriptions() -> None:
    photo = HeldImages().add(PHOTO, "receipt.png")
    part = [LoggedMessage(1, "user", "keep this", attachments=(photo,))]
    text = render_transcript(part, {photo.sha256: "a receipt for 42.50 CHF"})
    assert "[the user sent an image, receipt.png: a receipt for 42.50 CHF]" in text
    assert "not described" in render_transcript(part, {})


async def test_images_are_withheld_from_a_server_that_cannot_see(
    luna_config: Callable[..., Config], llm_server: FakeLLMServer
) -> None:
    # A failover (or any caller) that sends image parts to a text-only server: the client puts
    # a line in their place, since llama-server would answer HTTP 500.
    llm = LLMClient(luna_config().llm)
    parts = [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}]
    try:
        await llm.chat([{"role": "user", "content": [*parts, {"type": "text", "text": "hi"}]}])
    finally:
        await llm.close()
    assert llm_server.requests[-1]["messages"][0]["content"][0]["text"] == IMAGE_WITHHELD


async def test_images_an_image_whose_file_is_gone_is_said_so_to_a_model_that_sees(
    setup: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    llm_server.vision = True
    agent, images, _memory = await setup()
    lost = images.add(PHOTO, "lost.png")
    images.data.clear()  # the store lost it
    await _turn(agent, "what was this?", lost)
    (sent,) = _chat(llm_server)
    first, text = sent["messages"][-1]["content"]
    assert first["type"] == "text" and "lost.png" in first["text"] and "gone" in first["text"]
    assert "cannot see" not in json.dumps(sent) and text["text"].startswith("what was this?")
