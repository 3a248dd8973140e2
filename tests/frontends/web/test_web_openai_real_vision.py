"""The OpenAI-compatible API, with the real ``openai`` SDK as the client, against a real
``python -m luna web`` backed by the real llama-server with a vision projector
(tests/real_llama.py, ``vision=True``): an ``image_url`` part (a ``data:`` URL) reaches the
server as an image it decodes, and the next turn's request repeats the same bytes."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable
from pathlib import Path

from openai import OpenAI

from luna.agent.notes import EMPTY_REPLY
from luna.memory.storage.request_log import RequestLog
from tests.fakes.attachments import photo
from tests.frontends.web.conftest import TOKEN
from tests.frontends.web.process import LunaWebProcess
from tests.real_llama import ALIAS, RealLlama

IMAGE_DECODED = re.compile(r"image decoded \(batch 1/1\)")


def _data_url(data: bytes) -> str:
    return f"data:image/jpeg;base64,{base64.b64encode(data).decode()}"


def _images(messages: list[dict]) -> list[dict]:
    return [
        p
        for m in messages
        if isinstance(m.get("content"), list)
        for p in m["content"]
        if p.get("type") == "image_url"
    ]


def test_openai_sdk_image_url_reaches_the_real_vision_server_and_is_resent_as_is(
    tmp_path: Path, real_llama: Callable[..., RealLlama]
) -> None:
    real = real_llama("luna", fresh_server=True, vision=True)
    config = (
        f'[llm]\nmodel = "{ALIAS}"\nmax_tokens = 16\ntemperature = 0.0\n'
        "[memory]\nlibrarian = false\n"
    )
    luna = LunaWebProcess(tmp_path, real.url, config).start()
    try:
        client = OpenAI(api_key=TOKEN, base_url=f"{luna.url}/v1", max_retries=0, timeout=300)
        asked = {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is in this photo?"},
                {"type": "image_url", "image_url": {"url": _data_url(photo(320, 240))}},
            ],
        }
        first = client.chat.completions.with_raw_response.create(
            model="luna", messages=[asked], user="viewer", max_tokens=16
        )
        reply = first.parse().choices[0].message.content or ""
        log_after_first = real.log_path.read_text(errors="replace")
        second = client.chat.completions.with_raw_response.create(
            model="luna",
            messages=[
                asked,
                {"role": "assistant", "content": reply},
                {"role": "user", "content": "And its colours?"},
            ],
            user="viewer",
            max_tokens=16,
        )
        # The random projector's noise may be no words at all: Luna then shows a notice it
        # does not log, and the client's copy differs from the log (the log wins).
        expected = "diverged" if reply == EMPTY_REPLY else "continued"
        assert second.headers["x-luna-history"] == expected
        assert second.parse().choices[0].message.content is not None
    finally:
        assert luna.stop() == 0, "".join(luna.stderr)
    assert len(IMAGE_DECODED.findall(log_after_first)) >= 1  # the server decoded the photo
    chat = RequestLog(tmp_path / "data" / "requests.db").for_session("api:viewer")
    assert chat and not any(r.error for r in chat), [r.error for r in chat]
    turns = list(dict.fromkeys(r.turn_id for r in chat))
    assert len(turns) == 2  # (a turn may ask again after an empty answer)
    first_request, next_turn = chat[0], next(r for r in chat if r.turn_id == turns[1])
    sent_first = _images(first_request.messages)
    assert len(sent_first) == 1 and sent_first[0]["image_url"]["url"].startswith("data:image/")
    assert all(_images(r.messages) == sent_first for r in chat)  # byte for byte, every time
    decoded = len(IMAGE_DECODED.findall(real.log_path.read_text(errors="replace")))
    print(
        f"turn 2: {next_turn.cached_tokens} of {next_turn.prompt_tokens} prompt tokens cached; "
        f"image decoded {decoded} time(s) in all"
    )
    # One slot: the describer waits for quiet (attachments.describe_after_idle), so nothing
    # took the slot between the turns: the photo was decoded once and turn 2 reused it.
    assert decoded == 1
    assert (next_turn.cached_tokens or 0) > (next_turn.prompt_tokens or 0) * 0.9
