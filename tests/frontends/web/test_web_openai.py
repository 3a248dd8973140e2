"""The OpenAI-compatible API, with the real ``openai`` SDK as the client, against the running
web front-end and the scripted LLM."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.web.conftest import TOKEN


def sdk(luna: Any, **headers: str) -> AsyncOpenAI:
    return AsyncOpenAI(
        api_key=TOKEN, base_url=f"{luna.url}/v1", default_headers=headers, max_retries=0
    )


async def logged(luna: Any, session: str) -> list[tuple[str, str]]:
    return [(m.role, m.content) for m in await luna.memory.session_messages(session)]


async def test_models_lists_luna(web_luna: Callable[..., Any]) -> None:
    luna = await web_luna()
    models = await sdk(luna).models.list()
    assert [m.id for m in models.data] == ["luna"]


async def test_completion_non_streaming_answers_and_logs_once(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    luna = await web_luna()
    llm_server.script(Reply(content="Paris."))
    client = sdk(luna)
    raw = await client.chat.completions.with_raw_response.create(
        model="luna", messages=[{"role": "user", "content": "Capital of France?"}]
    )
    done = raw.parse()
    assert done.choices[0].message.content == "Paris."
    assert done.choices[0].finish_reason == "stop"
    assert done.usage is not None and done.usage.prompt_tokens > 0
    assert raw.headers["x-luna-session"] == "api:default"
    assert raw.headers["x-luna-history"] == "continued"
    assert await logged(luna, "api:default") == [
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
    ]


async def test_completion_streaming_yields_deltas_in_order_with_usage(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    luna = await web_luna()
    llm_server.script(Reply(content="one two three four five", chunk_size=3))
    stream = await sdk(luna).chat.completions.create(
        model="luna",
        messages=[{"role": "user", "content": "count"}],
        stream=True,
        stream_options={"include_usage": True},
        user="counter",
    )
    pieces, finish, usage = [], None, None
    async for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            if choice.delta.content:
                pieces.append(choice.delta.content)
            finish = choice.finish_reason or finish
    assert len(pieces) > 3 and "".join(pieces) == "one two three four five"
    assert finish == "stop"
    assert usage is not None and usage.completion_tokens > 0
    assert await logged(luna, "api:counter") == [
        ("user", "count"),
        ("assistant", "one two three four five"),
    ]


async def test_resent_history_is_never_logged_twice(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    """A client that resends the whole conversation each time (as every OpenAI client does)."""
    luna = await web_luna()
    llm_server.script(Reply(content="Hello!"), Reply(content="I am fine."), Reply(content="Bye!"))
    client = sdk(luna, **{"X-Luna-Session": "api:chat1"})
    history: list[dict[str, str]] = []
    for text in ("hi", "how are you?", "bye"):
        history.append({"role": "user", "content": text})
        done = await client.chat.completions.create(model="luna", messages=history)
        history.append({"role": "assistant", "content": done.choices[0].message.content})
    assert await logged(luna, "api:chat1") == [
        ("user", "hi"),
        ("assistant", "Hello!"),
        ("user", "how are you?"),
        ("assistant", "I am fine."),
        ("user", "bye"),
        ("assistant", "Bye!"),
    ]
    # Luna built each prompt from its own log: the third request carries each exchange once.
    third = [m["role"] for m in llm_server.requests[2]["messages"]]
    assert third == ["system", "user", "assistant", "user", "assistant", "user"]


async def test_resend_of_an_answered_request_replays_the_stored_reply(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    luna = await web_luna()
    llm_server.script(Reply(content="First."), Reply(content="Second."))
    client = sdk(luna, **{"X-Luna-Session": "api:retry"})
    convo = [{"role": "user", "content": "one"}]
    first = await client.chat.completions.create(model="luna", messages=convo)
    convo += [{"role": "assistant", "content": first.choices[0].message.content}]
    convo += [{"role": "user", "content": "two"}]
    await client.chat.completions.create(model="luna", messages=convo)
    requests_before = len(llm_server.requests)
    # The connection dropped before the client saw the answer: it sends the same request again.
    raw = await client.chat.completions.with_raw_response.create(
        model="luna", messages=convo, stream=True
    )
    assert raw.headers["x-luna-history"] == "replayed"
    text = "".join([c.choices[0].delta.content or "" async for c in raw.parse() if c.choices])
    assert text == "Second."
    assert len(llm_server.requests) == requests_before  # no turn ran
    assert [r for r, _ in await logged(luna, "api:retry")] == ["user", "assistant"] * 2


async def test_diverged_history_answers_in_lunas_own_context(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    luna = await web_luna()
    llm_server.script(Reply(content="A1"), Reply(content="A2"))
    client = sdk(luna, **{"X-Luna-Session": "api:edit"})
    await client.chat.completions.create(model="luna", messages=[{"role": "user", "content": "q1"}])
    edited = [
        {"role": "user", "content": "q1 (edited)"},
        {"role": "assistant", "content": "A1"},
        {"role": "user", "content": "q2"},
    ]
    raw = await client.chat.completions.with_raw_response.create(model="luna", messages=edited)
    assert raw.headers["x-luna-history"] == "diverged"
    assert raw.parse().choices[0].message.content == "A2"
    assert await logged(luna, "api:edit") == [
        ("user", "q1"),
        ("assistant", "A1"),
        ("user", "q2"),
        ("assistant", "A2"),
    ]


async def test_failed_turn_is_an_api_error_streaming_or_not(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    luna = await web_luna()
    refusal = Reply(status=400, error_body={"error": {"message": "bad", "type": "x", "code": 400}})
    llm_server.script(refusal, refusal)
    client = sdk(luna)
    with pytest.raises(openai.APIStatusError) as caught:
        await client.chat.completions.create(
            model="luna", messages=[{"role": "user", "content": "x"}]
        )
    assert caught.value.status_code == 502
    stream = await client.chat.completions.create(
        model="luna", messages=[{"role": "user", "content": "y"}], stream=True
    )
    with pytest.raises(openai.APIError):
        async for _ in stream:
            pass


async def test_bad_requests_get_openai_shaped_errors(web_luna: Callable[..., Any]) -> None:
    luna = await web_luna()
    client = sdk(luna)
    with pytest.raises(openai.BadRequestError, match="last message"):
        await client.chat.completions.create(
            model="luna", messages=[{"role": "assistant", "content": "hi"}]
        )
    with pytest.raises(openai.BadRequestError, match="session"):
        await sdk(luna, **{"X-Luna-Session": "no spaces allowed"}).chat.completions.create(
            model="luna", messages=[{"role": "user", "content": "hi"}]
        )
    with pytest.raises(openai.AuthenticationError):
        wrong = AsyncOpenAI(api_key="wrong-token-xxxxxxxxxxxx", base_url=f"{luna.url}/v1")
        await wrong.models.list()


async def test_a_reply_cut_at_max_tokens_finishes_with_length(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    """The server said ``finish_reason: "length"``: so does Luna, streaming or not."""
    luna = await web_luna()
    llm_server.script(
        Reply(content="The first half of a long", finish_reason="length"),
        Reply(content="And another cut", finish_reason="length", chunk_size=4),
        Reply(content="A whole answer."),
    )
    client = sdk(luna, **{"X-Luna-Session": "api:cut"})
    done = await client.chat.completions.create(
        model="luna", messages=[{"role": "user", "content": "tell me everything"}]
    )
    assert done.choices[0].message.content == "The first half of a long"
    assert done.choices[0].finish_reason == "length"
    stream = await client.chat.completions.create(
        model="luna", messages=[{"role": "user", "content": "again"}], stream=True
    )
    finishes = [c.choices[0].finish_reason async for c in stream if c.choices]
    assert [f for f in finishes if f] == ["length"]
    whole = await client.chat.completions.create(
        model="luna", messages=[{"role": "user", "content": "briefly"}]
    )
    assert whole.choices[0].finish_reason == "stop"
