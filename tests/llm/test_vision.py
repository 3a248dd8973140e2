"""Images on the real llama-server with a vision projector (tests/real_llama.py, vision=True).

The projector has random weights (``.ci/vision_model.py``): its answers are noise, but how the
server takes an image, what it costs in tokens and how it caches it are the server's own. The
wire claims Luna relies on are checked here against the C++ server: ``/props`` reports
vision, an image part renders through Luna's Qwen3.5 template (in a user message and in a tool
message), and a server without a projector answers an image with HTTP 500, which is why Luna
never sends it one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest

from luna.agent.describer import ImageDescriber
from luna.config import build_config
from luna.llm import LLMClient
from luna.llm.vision import IMAGE_WITHHELD, image_part, text_part
from luna.memory import Memory
from tests.fakes.images import HeldImages, png
from tests.real_llama import ALIAS, RealLlama


def _client(real: RealLlama, tmp_path: Path) -> LLMClient:
    cfg = build_config({"llm": {"endpoint": real.url, "model": ALIAS}}, {}, base_dir=tmp_path)
    return LLMClient(cfg.llm)


def _ask(image: bytes, text: str = "What is in this picture?") -> list[dict]:
    return [
        {"role": "system", "content": "You are Luna."},
        {"role": "user", "content": [image_part("image/png", image), text_part(text)]},
    ]


async def test_vision_props_report_what_each_server_sees(
    real_llama: Callable[..., RealLlama], tmp_path: Path
) -> None:
    seeing, blind = real_llama("luna", vision=True), real_llama("luna")
    assert seeing.props()["modalities"]["vision"] is True
    assert blind.props()["modalities"]["vision"] is False
    for real, expected in ((seeing, True), (blind, False)):
        client = _client(real, tmp_path)
        try:
            assert await client.can_see() is expected
            info = await client.server_info()
            assert info is not None and info.has_vision is expected
        finally:
            await client.close()


async def test_vision_text_only_server_answers_500_and_the_client_never_sends_it(
    real_llama: Callable[..., RealLlama], tmp_path: Path
) -> None:
    blind = real_llama("luna")
    body = {"messages": _ask(png(64, 48)), "max_tokens": 4}
    raw = blind.post("/v1/chat/completions", body)
    assert raw.status_code == 500, raw.text  # what Luna must never provoke
    assert "mmproj" in raw.text
    client = _client(blind, tmp_path)
    seen: list[dict] = []

    async def record(body: dict, _response: object, _error: object) -> None:
        seen.append(body)

    try:
        response = await client.chat(_ask(png(64, 48)), max_tokens=4, record=record)
    finally:
        await client.close()
    assert response.finish_reason is not None
    parts = seen[0]["messages"][-1]["content"]
    assert parts[0] == text_part(IMAGE_WITHHELD)
    assert not any(p.get("type") == "image_url" for p in parts)


@pytest.mark.parametrize("template", ["luna", "stock"])
async def test_vision_image_parts_render_through_qwen_templates_in_user_and_tool_messages(
    real_llama: Callable[..., RealLlama], template: str
) -> None:
    # llama-server swaps each image part for its media marker and joins the parts into one
    # string before the template runs: Luna's text-only template renders it like the stock one
    real = real_llama(template, vision=True)
    marker = real.props()["media_marker"]
    image = image_part("image/png", png(32, 32))
    call = {"id": "c1", "type": "function", "function": {"name": "look", "arguments": "{}"}}
    messages = [
        {"role": "system", "content": "You are Luna."},
        {"role": "user", "content": [image, text_part("what is this?")]},
        {"role": "assistant", "content": "", "reasoning_content": "Look.", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": [text_part("chart.png"), image]},
    ]
    prompt = real.render(messages)
    assert f"<|im_start|>user\n{marker}what is this?<|im_end|>" in prompt
    assert f"<tool_response>\nchart.png{marker}\n</tool_response>" in prompt
    # and the server takes it: two images, each its own 256 tokens here (Gemma 3's projector)
    r = real.post("/v1/chat/completions", {"messages": messages, "max_tokens": 1})
    assert r.status_code == 200, r.text


SIZES = ((320, 240), (640, 480), (1024, 768), (1024, 1024), (1536, 1152), (2048, 1536))


def _image_costs(real: RealLlama, sizes: tuple[tuple[int, int], ...] = SIZES) -> dict[str, int]:
    """Prompt tokens an image adds, by its size (the request without it as the baseline)."""
    question = [_ask(b"")[0], {"role": "user", "content": "What is in this picture?"}]
    text_only = real.post("/v1/chat/completions", {"messages": question, "max_tokens": 1})
    without = text_only.json()["usage"]["prompt_tokens"]
    costs = {}
    for width, height in sizes:
        body = {"messages": _ask(png(width, height, seed=width + height)), "max_tokens": 1}
        usage = real.post("/v1/chat/completions", body).json()["usage"]
        costs[f"{width}x{height}"] = usage["prompt_tokens"] - without
    return costs


async def test_vision_tokens_an_image_costs_by_size(
    real_llama: Callable[..., RealLlama],
) -> None:
    """What an image costs, by size, on Gemma 3's projector and on one with Qwen3.5's image
    geometry (for the README)."""
    gemma = _image_costs(real_llama("luna", vision=True))
    qwen = _image_costs(real_llama("luna", vision="qwen3.5"))
    print(f"\nimage tokens, Gemma 3 projector: {gemma}\nQwen3.5 geometry: {qwen}")
    # Gemma 3 squeezes every image into 896x896 and pools it to 16x16 soft tokens, plus the
    # begin- and end-of-image tokens around them: the same cost at every size.
    assert set(gemma.values()) == {258}, gemma
    # Qwen3.5: one token per 32x32 pixels (16-pixel patches merged 2x2; each side rounded to
    # the nearest 32), plus its <|vision_start|> and <|vision_end|> markers, which Gemma's
    # vocabulary spells in a few plain tokens: the same overhead for every size.
    grid = {f"{w}x{h}": math.floor(w / 32 + 0.5) * math.floor(h / 32 + 0.5) for w, h in SIZES}
    overhead = {size: qwen[size] - grid[size] for size in grid}
    assert len(set(overhead.values())) == 1 and 2 <= next(iter(overhead.values())) <= 16, qwen
    # a phone photo sent as it is: llama.cpp shrinks it to at most 4,096 image tokens
    photo = _image_costs(real_llama("luna", vision="qwen3.5"), ((4032, 3024),))["4032x3024"]
    print(f"a 4032x3024 photo, not downscaled: {photo}")
    assert 4000 < photo - next(iter(overhead.values())) <= 4096


async def test_vision_describer_asks_the_real_server_and_stores_what_it_says(
    real_llama: Callable[..., RealLlama], tmp_path: Path
) -> None:
    # The words are the random projector's noise; the request, the server's answer and the
    # stored description are real.
    real = real_llama("luna", vision=True)
    data = {
        "llm": {"endpoint": real.url, "model": ALIAS},
        "memory": {"db_path": str(tmp_path / "m.db")},
    }
    cfg = build_config(data, {}, base_dir=tmp_path)
    memory = Memory(cfg.memory)
    await memory.open(background=False)
    client = LLMClient(cfg.llm)
    images = HeldImages()
    photo = images.add(png(200, 150, seed=5), "receipt.png")
    describer = ImageDescriber(client, memory, images, max_tokens=24)
    try:
        # A description is kept for an image a message carries (a forgotten one's is not).
        await memory.append_message(
            "s", {"role": "user", "content": "my receipt", "attachments": [photo.to_json()]}
        )
        describer.note([photo])
        describer.start()
        await describer.wait_idle()
        described = await memory.image_descriptions([photo.sha256])
    finally:
        await client.close()
        await memory.close()
    assert list(described) == [photo.sha256] and described[photo.sha256].strip()
