"""The describer never costs a session its KV cache: measured on the real llama-server with a
vision projector (tests/real_llama.py, ``vision=True``).

The describer asks the background model to describe each image once a turn has ended. On a
server with two slots or more Luna pins sessions to their own slots and background work to the
last one, so the description runs beside the session's cache. On a server with one slot the
description would take the slot the session's cache lives in, and the next turn would prefill
everything again: there it waits until no turn has run for ``attachments.describe_after_idle``
seconds. The chat turns are scripted words on the real server (tests/fakes/scripted_llama.py:
real rendering, real image encoding and caching); the description is a real request to the
real server (its words are the random projector's noise).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from luna.agent import Agent
from luna.config import build_config
from luna.llm import LLMClient
from luna.memory import Memory
from luna.messages import InboundMessage, TurnDone
from tests.fakes.images import HeldImages, png
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.scripted_llama import Recorder, bench_config, on_real_server
from tests.fakes.tools import echo_registry
from tests.real_llama import ALIAS, RealLlama

IDLE_S = 1.0  # attachments.describe_after_idle for the one-slot case
OLD_TOKENS_AT_MOST = 8  # a restored checkpoint gives back a few tokens less than it holds


async def _turns(
    real: RealLlama, slots: int, llm_server: FakeLLMServer, tmp_path: Path
) -> tuple[Recorder, list[bool]]:
    """Three turns, a photo in the first, and the describer waited for after turn 1 (two
    slots: at once; one slot: after ``IDLE_S`` of quiet, so turn 3 shows what it costs). The
    recorder, and after turns 1 and 2 whether the photo had been described."""
    llm_server.vision, llm_server.total_slots = True, slots  # the scripted server answers
    data = bench_config(tmp_path, {"endpoint": llm_server.url, "model": "m",
                                   "history_reasoning": "keep"})  # fmt: skip
    data["attachments"] = {"describe_after_idle": IDLE_S}
    cfg = build_config(data, {}, base_dir=tmp_path)
    memory = Memory(cfg.memory)
    await memory.open(background=False)
    llm = LLMClient(cfg.llm)
    # The describer asks the real server itself: its /props, its slots, its cache.
    background = LLMClient(cfg.llm.model_copy(update={"endpoint": real.url, "model": ALIAS}))
    images = HeldImages()
    agent = Agent(cfg, llm, memory, echo_registry(cfg), images=images, background_llm=background)
    describer = agent.sight.describer
    assert describer is not None
    describer.max_tokens = 48  # noise either way; keep the test short
    photo = images.add(png(320, 240, seed=11), name="receipt.png")
    recorder = Recorder()
    described: list[bool] = []
    try:
        for i in range(3):
            llm_server.script(on_real_server(real, Reply(content=f"Done {i}."), recorder))
            msg = InboundMessage("s", f"turn {i}", attachments=(photo,) if i == 0 else ())
            events = [e async for e in agent.run_turn(msg)]
            assert isinstance(events[-1], TurnDone), events[-1]
            if slots > 1 and i == 0 or i == 1:
                await describer.wait_idle()
            if i < 2:
                described.append(bool(await memory.image_descriptions([photo.sha256])))
    finally:
        await agent.drain(1.0)
        await llm.close()
        await background.close()
        await memory.close()
    return recorder, described


@pytest.mark.parametrize("slots", [1, 2])
async def test_describer_leaves_the_next_turns_cache_alone(
    slots: int,
    real_llama: Callable[..., RealLlama],
    llm_server: FakeLLMServer,
    tmp_path: Path,
) -> None:
    real = real_llama("luna", slots=slots, fresh_server=True, vision=True)
    recorder, described = await _turns(real, slots, llm_server, tmp_path)
    steps = recorder.steps
    old = [max(0, s.held_tokens - s.cached_tokens) for s in steps]
    print(
        f"\n{slots} slot(s): described after turns 1, 2: {described}; prompt tokens "
        f"{[s.prompt_tokens for s in steps]}, cached {[s.cached_tokens for s in steps]}, "
        f"prefilled {[s.prefilled_tokens for s in steps]}, old tokens prefilled again {old}"
    )
    assert described == ([True, True] if slots > 1 else [False, True])
    assert old[1] <= OLD_TOKENS_AT_MOST, f"turn 2 prefilled {old[1]} old tokens again"
    if slots > 1:
        assert old[2] <= OLD_TOKENS_AT_MOST, f"turn 3 prefilled {old[2]} old tokens again"
    else:  # what the quiet wait spares turn 2: the description took the slot before turn 3
        assert old[2] > steps[1].prompt_tokens // 2, old[2]
