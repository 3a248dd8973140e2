"""Images through the OpenAI-compatible API, with the real ``openai`` SDK against the running
web front-end and the scripted LLM: ``data:`` URLs are stored and reach the model, anything
else is a 400 that says why."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import openai
import pytest
from aiohttp import web

from luna.attachments.images import normalize
from tests.fakes.images import png
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.web.test_web_openai import sdk

PHOTO = png(300, 200, seed=7)


def data_url(data: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


def with_image(text: str, url: str) -> list[dict[str, Any]]:
    return [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": text},
                {"type": "image_url", "image_url": {"url": url}},
            ],
        }
    ]


def chat_requests(server: FakeLLMServer) -> list[dict[str, Any]]:
    return [r for r in server.requests if r["messages"][0]["role"] == "system"]


async def test_openai_image_data_url_reaches_a_model_that_sees(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    llm_server.vision = True
    llm_server.default = Reply(content="A picture.")
    luna = await web_luna()
    done = await sdk(luna).chat.completions.create(
        model="luna", messages=with_image("what is this?", data_url(PHOTO, "image/jpeg"))
    )
    assert done.choices[0].message.content == "A picture."
    sha = hashlib.sha256(PHOTO).hexdigest()
    assert (luna.cfg.data_dir / "attachments" / sha[:2] / sha).read_bytes() == PHOTO
    (request,) = chat_requests(llm_server)
    sent = request["messages"][-1]
    assert [p["type"] for p in sent["content"]] == ["image_url", "text"]
    assert sent["content"][0]["image_url"]["url"] == data_url(normalize(PHOTO)[1])
    assert sent["content"][1]["text"].startswith("what is this?")
    (logged, _reply) = await luna.memory.session_messages("api:default")
    assert [(a.mime, a.name) for a in logged.attachments] == [("image/png", "image-1.png")]


async def test_openai_image_alone_is_a_message(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    llm_server.default = Reply(content="I cannot see it.")  # the fake reports no vision
    luna = await web_luna()
    message = {"type": "image_url", "image_url": {"url": data_url(PHOTO)}}
    done = await sdk(luna).chat.completions.create(
        model="luna", messages=[{"role": "user", "content": [message]}]
    )
    assert done.choices[0].message.content.startswith("I cannot see it.")
    (request,) = chat_requests(llm_server)
    assert "[image image-1.png (image/png," in request["messages"][-1]["content"]
    assert "image_url" not in json.dumps(request)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:9/cat.png", "image 1: refused: 127.0.0.1 resolves to a non-public"),
        ("http://169.254.169.254/latest/meta-data", "non-public address (169.254.169.254)"),
        ("file:///etc/passwd", "only data: and http(s) URLs are taken"),
        ("data:image/png;base64,%%%", "its base64 data is not valid"),
        ("data:image/png,rawbytes", "not a base64 data: URL"),
        (data_url(b"these are notes, not pixels"), "image-1.unknown refused: its bytes are not"),
        (data_url(PHOTO[:80]), "corrupt or not an image"),
    ],
)
async def test_openai_image_refused_with_a_400_that_says_why(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer, url: str, says: str
) -> None:
    luna = await web_luna()
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk(luna).chat.completions.create(model="luna", messages=with_image("see", url))
    assert says in caught.value.message
    assert chat_requests(llm_server) == []
    assert await luna.memory.session_messages("api:default") == []


@pytest.fixture
async def picture_site() -> AsyncIterator[str]:
    """A real HTTP server on 127.0.0.1: /cat.png is PHOTO, /gone is a 404."""

    async def cat(_request: web.Request) -> web.Response:
        return web.Response(body=PHOTO, content_type="image/png")

    app = web.Application()
    app.router.add_get("/cat.png", cat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"127.0.0.1:{port}"
    await runner.cleanup()


async def test_openai_image_http_url_is_fetched_through_the_ssrf_guard(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer, picture_site: str
) -> None:
    llm_server.vision = True
    llm_server.default = Reply(content="A cat.")
    luna = await web_luna({"tools": {"fetch_allow_hosts": [picture_site]}})
    done = await sdk(luna).chat.completions.create(
        model="luna", messages=with_image("and this?", f"http://{picture_site}/cat.png")
    )
    assert done.choices[0].message.content == "A cat."
    (request,) = chat_requests(llm_server)
    assert request["messages"][-1]["content"][0]["image_url"]["url"] == data_url(
        normalize(PHOTO)[1]
    )
    with pytest.raises(openai.BadRequestError) as caught:
        await sdk(luna).chat.completions.create(
            model="luna", messages=with_image("and?", f"http://{picture_site}/gone")
        )
    assert f"image 1: http://{picture_site}/gone answered HTTP 404" in caught.value.message
