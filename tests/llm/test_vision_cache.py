"""An image stays in the KV cache: measured on the real llama-server with a vision projector.

The real agent runs a 10-turn session with tool rounds against the scripted model on the real
server (tests/fakes/scripted_llama.py: scripted words, real rendering, real image encoding and
caching), without ``--swa-full``, as the production model caches. The user sends a photo at
turn 1; at turn 5 a tool returns an image (a chart). Each image must be encoded once (the
server's log names every image it decodes), and no token the server already held may be
prefilled again: every request repeats each image byte for byte, after the same text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from luna.agent import Agent
from luna.config import build_config
from luna.llm import LLMClient
from luna.memory import Memory
from luna.messages import InboundMessage, ToolMedia, ToolResult, TurnDone
from tests.fakes.images import HeldImages, png
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.scripted_llama import Recorder, on_real_server
from tests.fakes.tools import echo_registry
from tests.real_llama import RealLlama

TURNS = 10
CHART_AT = 4  # this turn's tool returns an image
IMAGE_DECODED = re.compile(r"image decoded \(batch 1/1\)")
RESTORED = re.compile(r"restored context checkpoint \(.*n_past = (\d+),")


def _call(name: str, arguments: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "arguments": json.dumps(arguments), "id": call_id}


async def test_vision_cache_ten_turns_encode_each_image_once_and_prefill_nothing_old(
    real_llama: Callable[..., RealLlama], llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    real = real_llama("luna", fresh_server=True, vision=True)
    llm_server.vision = True  # the scripted server answers for the real one
    data = {
        "llm": {"endpoint": llm_server.url, "model": "m", "history_reasoning": "keep"},
        "memory": {"db_path": str(tmp_path / "luna.db"), "librarian": False},
        "observe": {"log_dir": str(tmp_path / "logs"), "console": False},
        "agent": {"workspace": str(tmp_path / "ws")},
        "mcp": {"servers_file": str(tmp_path / "none.json")},
    }
    cfg = build_config(data, {}, base_dir=tmp_path)
    memory = Memory(cfg.memory)
    await memory.open(background=False)
    llm = LLMClient(cfg.llm)
    images = HeldImages()
    registry = echo_registry(cfg)

    @registry.tool(level="allow")
    async def chart(name: str) -> ToolResult:
        """Draw a chart.

        Args:
            name: what to chart
        """
        image = ToolMedia("image", "image/png", png(320, 200, 7))
        return ToolResult(f"chart of {name}", media=(image,))

    # Background work (the describer) on a server of its own that cannot see: it leaves the
    # session's server and script alone.
    background_server = FakeLLMServer().start()
    bg_cfg = build_config({"llm": {"endpoint": background_server.url}}, {}, base_dir=tmp_path)
    background = LLMClient(bg_cfg.llm)
    agent = Agent(cfg, llm, memory, registry, images=images, background_llm=background)
    photo = images.add(png(640, 480, seed=1), name="receipt.png")
    recorder = Recorder()
    log_start = real.log_path.stat().st_size
    try:
        for i in range(TURNS):
            tool, args = (
                ("chart", {"name": f"c{i}"}) if i == CHART_AT else ("echo", {"text": f"x{i}"})
            )
            llm_server.script(
                on_real_server(
                    real,
                    Reply(reasoning=f"Turn {i}.", tool_calls=[_call(tool, args, f"c{i}")]),
                    recorder,
                ),
                on_real_server(real, Reply(reasoning="Done.", content=f"Done {i}."), recorder),
            )
            attachments = (photo,) if i == 0 else ()
            msg = InboundMessage("s", f"turn {i}: look", attachments=attachments)
            events = [e async for e in agent.run_turn(msg)]
            assert isinstance(events[-1], TurnDone), events[-1]
            assert events[-1].reply == f"Done {i}."  # it can see: no notice
    finally:
        await agent.drain(1.0)
        await llm.close()
        await background.close()
        await memory.close()
        background_server.stop()
    steps = recorder.steps
    assert len(steps) == 2 * TURNS
    log = real.log_path.read_text(errors="replace")[log_start:]
    encoded = len(IMAGE_DECODED.findall(log))
    restores = [int(n) for n in RESTORED.findall(log)]
    old = [max(0, s.held_tokens - s.cached_tokens) for s in steps]
    print(
        f"\n{len(steps)} requests, images per request {[s.images for s in steps]}, "
        f"images encoded {encoded}; prompt tokens {[s.prompt_tokens for s in steps]}; "
        f"cached {[s.cached_tokens for s in steps]}; prefilled "
        f"{[s.prefilled_tokens for s in steps]}; old tokens prefilled again {old}"
    )
    assert steps[0].images == 1 and steps[-1].images == 2
    assert encoded == 2, "each image is encoded once: the photo at turn 1, the chart at turn 5"
    for i, step in enumerate(steps[1:], start=1):
        assert step.prompt.startswith(step.held_before), f"step {i + 1} rewrote history"
        # As in test_kv_cache: a restored checkpoint gives back one token less than it holds,
        # a few tokens the log names; anything more prefilled again would be Luna's doing.
        if old[i]:
            assert old[i] <= 8 and step.cached_tokens in restores, (i, old[i], restores)
    # the photo alone is 258 tokens: no request read it again
    assert all(s.prefilled_tokens < 258 for s in steps[1:] if s is not steps[2 * CHART_AT + 1])
