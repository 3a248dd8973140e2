"""The LLM client: the only code that talks to the model (an OpenAI-compatible endpoint).

Job: send chat requests (plain or streaming, with tools) to llama-server or any
OpenAI-compatible server and return a structured :class:`~luna.messages.LLMResponse`.

Invariants:
- Messages are normalized before sending: exactly one leading system message (later system
  messages are merged into it), ``""`` never ``null`` for content, tool calls in wire form.
- Connect errors, HTTP 5xx and 429 are retried with exponential backoff (``llm.max_retries``,
  ``llm.retry_backoff``); a stream is only retried before it has produced anything.
- Every openai/httpx exception is translated here, once, into ``LLMUnreachableError`` (one
  line naming the URL and the fix) or ``LLMError``; decisions use types and status codes.
- Leaked ``<think>`` / tool-call markup never reaches the caller (see ``luna.llm_markup``).
- One ``llm_call`` event is logged per call. The API key only travels in the Authorization
  header.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import openai

from luna.config import LLMConfig
from luna.errors import LLMError, LLMUnreachableError
from luna.llm.markup import StreamFilter, clean_reply, new_call_id
from luna.messages import LLMResponse, ToolCall, Usage
from luna.observe import log_event

_log = logging.getLogger(__name__)

TextCallback = Callable[[str], Awaitable[None]]
NO_KEY = "sk-no-key-required"
MAX_RETRY_AFTER = 30.0


# ---- message normalization -----------------------------------------------------------------


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def _wire_tool_call(tc: Any) -> dict[str, Any]:
    if isinstance(tc, ToolCall):
        return tc.to_wire()
    fn = dict(tc.get("function") or {})
    args = fn.get("arguments")
    if not isinstance(args, str):
        fn["arguments"] = json.dumps(args if args is not None else {}, ensure_ascii=False)
    return {"id": tc.get("id") or new_call_id(), "type": "function", "function": fn}


def normalize_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The message list as strict servers (llama.cpp, Qwen templates) accept it."""
    system: list[str] = []
    rest: list[dict[str, Any]] = []
    for message in messages:
        m = dict(message)
        role = m.get("role")
        if role == "system":
            text = _text_of(m.get("content"))
            if text:
                system.append(text)
            continue
        if m.get("content") is None:
            m["content"] = ""
        if role == "assistant":
            calls = m.get("tool_calls")
            if calls:
                m["tool_calls"] = [_wire_tool_call(tc) for tc in calls]
            else:
                m.pop("tool_calls", None)
        rest.append(m)
    if system:
        return [{"role": "system", "content": "\n\n".join(system)}, *rest]
    return rest


# ---- error translation ---------------------------------------------------------------------


def _root_causes(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def _connect_reason(exc: BaseException) -> str | None:
    """Why a connection failed, or None if exc is not a connection failure."""
    chain = _root_causes(exc)
    if any(isinstance(e, httpx.ConnectTimeout) for e in chain):
        return "connection timed out"
    if not any(isinstance(e, httpx.ConnectError) for e in chain):
        return None
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return "connection refused"
    if any(isinstance(e, socket.gaierror) for e in chain):
        return "host name not found"
    return "connection failed"


def _status_message(exc: openai.APIStatusError) -> str:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error", body)
        msg = err.get("message") if isinstance(err, dict) else err
        if msg:
            return str(msg)[:200]
    return exc.response.reason_phrase or "error"


def _is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code == 429 or exc.status_code >= 500
    return _connect_reason(exc) is not None


def _retry_after(exc: BaseException) -> float | None:
    if isinstance(exc, openai.APIStatusError):
        value = exc.response.headers.get("retry-after")
        try:
            return min(float(value), MAX_RETRY_AFTER) if value else None
        except ValueError:
            return None
    return None


# ---- the client ----------------------------------------------------------------------------


class LLMClient:
    """Chat with an OpenAI-compatible endpoint; see the module docstring for invariants."""

    def __init__(self, cfg: LLMConfig) -> None:
        self.cfg = cfg
        self.endpoint = cfg.endpoint.rstrip("/")
        self.model = cfg.model
        self._timeout = httpx.Timeout(cfg.timeout, connect=cfg.connect_timeout)
        self._http = httpx.AsyncClient(timeout=self._timeout)
        self._client = openai.AsyncOpenAI(
            base_url=self.endpoint,
            api_key=cfg.api_key or NO_KEY,
            max_retries=0,
            timeout=self._timeout,
            http_client=self._http,
        )

    async def close(self) -> None:
        await self._client.close()
        await self._http.aclose()

    # -- public calls
    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> LLMResponse:
        """One non-streaming completion."""
        params = self._params(messages, tools, temperature, max_tokens, response_format)
        start = time.perf_counter()
        try:
            raw = await self._with_retries(lambda: self._client.chat.completions.create(**params))
        except LLMError as e:
            self._log_call(None, start, stream=False, error=e)
            raise
        choice = raw.choices[0] if raw.choices else None
        msg = choice.message if choice else None
        calls = [
            ToolCall(
                id=tc.id or new_call_id(),
                name=tc.function.name,
                arguments=tc.function.arguments or "{}",
            )
            for tc in (msg.tool_calls or [] if msg else [])
            if getattr(tc, "function", None) is not None
        ]
        response = self._finish(
            content=(msg.content or "") if msg else "",
            reasoning=_reasoning_of(msg),
            calls=calls,
            tools=tools,
            finish_reason=choice.finish_reason if choice else None,
            usage=_usage(raw.usage, getattr(raw, "timings", None)),
            model=raw.model or self.model,
            start=start,
        )
        self._log_call(response, start, stream=False)
        return response

    async def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        on_text: TextCallback | None = None,
        on_reasoning: TextCallback | None = None,
        response_format: dict[str, Any] | None = None,
    ) -> LLMResponse:
        """A streaming completion; text and reasoning deltas go to the callbacks as they come."""
        params = self._params(messages, tools, temperature, max_tokens, response_format)
        params["stream"] = True
        params["stream_options"] = {"include_usage": True}
        start = time.perf_counter()
        try:
            stream = await self._with_retries(
                lambda: self._client.chat.completions.create(**params)
            )
        except LLMError as e:
            self._log_call(None, start, stream=True, error=e)
            raise
        content: list[str] = []
        reasoning: list[str] = []
        calls: dict[int, dict[str, str]] = {}
        finish_reason: str | None = None
        raw_usage: Any = None
        timings: Any = None
        model = self.model
        filt = StreamFilter()
        try:
            async for chunk in stream:
                model = chunk.model or model
                raw_usage = chunk.usage or raw_usage
                timings = getattr(chunk, "timings", None) or timings
                for choice in chunk.choices or []:
                    if choice.finish_reason:
                        finish_reason = choice.finish_reason
                    delta = choice.delta
                    if delta is None:
                        continue
                    think = _reasoning_of(delta)
                    if think:
                        reasoning.append(think)
                        if on_reasoning:
                            await on_reasoning(think)
                    if delta.content:
                        content.append(delta.content)
                        visible, hidden = filt.feed(delta.content)
                        if visible and on_text:
                            await on_text(visible)
                        if hidden and on_reasoning:
                            await on_reasoning(hidden)
                    for tc in delta.tool_calls or []:
                        slot = calls.setdefault(tc.index, {"id": "", "name": "", "arguments": ""})
                        if tc.id:
                            slot["id"] = tc.id
                        if tc.function is not None:
                            slot["name"] += tc.function.name or ""
                            slot["arguments"] += tc.function.arguments or ""
            visible, hidden = filt.flush()
            if visible and on_text:
                await on_text(visible)
            if hidden and on_reasoning:
                await on_reasoning(hidden)
        except (openai.APIError, httpx.HTTPError) as e:
            err = self._translate(e)
            self._log_call(None, start, stream=True, error=err)
            raise err from e
        finally:
            await stream.close()
        if finish_reason is None:
            err = LLMError(
                f"the stream from the LLM at {self.endpoint} ended before the reply was complete"
            )
            self._log_call(None, start, stream=True, error=err)
            raise err
        response = self._finish(
            content="".join(content),
            reasoning="".join(reasoning),
            calls=[
                ToolCall(id=s["id"] or new_call_id(), name=s["name"], arguments=s["arguments"])
                for _, s in sorted(calls.items())
                if s["name"]
            ],
            tools=tools,
            finish_reason=finish_reason,
            usage=_usage(raw_usage, timings),
            model=model,
            start=start,
        )
        if on_text and not filt.released and response.content and not response.tool_calls:
            await on_text(response.content)  # reasoning fallback: the user must see something
        self._log_call(response, start, stream=True)
        return response

    # -- probes for `luna doctor`
    async def list_models(self) -> list[str]:
        """Model ids the endpoint serves (GET /v1/models)."""
        page = await self._with_retries(self._client.models.list, retries=0)
        return [m.id for m in page.data]

    async def server_props(self) -> dict[str, Any] | None:
        """llama.cpp's ``/props`` (at the server root); None when the server has none."""
        root = self.endpoint.removesuffix("/v1")
        headers = {"Authorization": f"Bearer {self.cfg.api_key}"} if self.cfg.api_key else {}
        try:
            r = await self._http.get(f"{root}/props", headers=headers)
        except httpx.HTTPError as e:
            raise self._translate(e) from e
        if r.status_code != 200:
            return None
        try:
            data = r.json()
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    # -- internals
    def _params(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        temperature: float | None,
        max_tokens: int | None,
        response_format: dict[str, Any] | None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": normalize_messages(messages),
            "temperature": self.cfg.temperature if temperature is None else temperature,
            "max_tokens": self.cfg.max_tokens if max_tokens is None else max_tokens,
        }
        if tools:
            params["tools"] = tools
        if response_format is not None:
            params["response_format"] = response_format
        return params

    async def _with_retries(
        self, call: Callable[[], Awaitable[Any]], retries: int | None = None
    ) -> Any:
        retries = self.cfg.max_retries if retries is None else retries
        attempt = 0
        while True:
            try:
                return await call()
            except (openai.APIError, httpx.HTTPError) as e:
                if attempt >= retries or not _is_retryable(e):
                    raise self._translate(e) from e
                delay = _retry_after(e) or self.cfg.retry_backoff * (2**attempt)
                attempt += 1
                _log.warning(
                    "LLM call failed (%s), retry %d/%d in %.2fs",
                    type(e).__name__,
                    attempt,
                    retries,
                    delay,
                )
                await asyncio.sleep(delay)

    def _translate(self, exc: BaseException) -> LLMError:
        reason = _connect_reason(exc)
        if reason is not None:
            return LLMUnreachableError(
                f"cannot reach the LLM at {self.endpoint}: {reason} — start llama-server or set "
                "LLM_ENDPOINT / [llm] endpoint in config.toml"
            )
        if isinstance(exc, openai.APIStatusError):
            hint = ""
            if exc.status_code in (401, 403):
                hint = " — check LLM_API_KEY"
            elif exc.status_code == 404:
                hint = " — check that [llm] endpoint ends with /v1 and [llm] model exists"
            return LLMError(
                f"the LLM at {self.endpoint} answered HTTP {exc.status_code}: "
                f"{_status_message(exc)}{hint}"
            )
        chain = _root_causes(exc)
        if any(isinstance(e, httpx.TimeoutException | openai.APITimeoutError) for e in chain):
            return LLMError(
                f"the LLM at {self.endpoint} did not answer within {self.cfg.timeout:g}s "
                "(raise [llm] timeout in config.toml for slow models)"
            )
        return LLMError(f"the LLM call to {self.endpoint} failed: {type(exc).__name__}: {exc}")

    def _finish(
        self,
        *,
        content: str,
        reasoning: str,
        calls: list[ToolCall],
        tools: list[dict[str, Any]] | None,
        finish_reason: str | None,
        usage: Usage | None,
        model: str,
        start: float,
    ) -> LLMResponse:
        text, thought, recovered, fallback = clean_reply(content, reasoning, tools)
        if fallback and calls:  # real tool calls: no need to show the reasoning as the reply
            text = ""
        if recovered:
            _log.info("recovered %d tool call(s) written as text", len(recovered))
            if not calls and finish_reason == "stop":
                finish_reason = "tool_calls"
        return LLMResponse(
            content=text,
            reasoning=thought,
            tool_calls=calls + recovered,
            usage=usage,
            finish_reason=finish_reason,
            latency_s=time.perf_counter() - start,
            model=model,
        )

    def _log_call(
        self,
        response: LLMResponse | None,
        start: float,
        *,
        stream: bool,
        error: BaseException | None = None,
    ) -> None:
        usage = response.usage if response else None
        log_event(
            "llm_call",
            model=response.model if response else self.model,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
            cached_tokens=usage.cached_tokens if usage else None,
            latency_ms=round((time.perf_counter() - start) * 1000, 1),
            stream=stream,
            finish_reason=response.finish_reason if response else None,
            tool_calls=len(response.tool_calls) if response else 0,
            error=str(error) if error else None,
        )


def _reasoning_of(obj: Any) -> str:
    """reasoning_content (llama.cpp, DeepSeek) or reasoning (vLLM, OpenRouter)."""
    if obj is None:
        return ""
    for name in ("reasoning_content", "reasoning"):
        value = getattr(obj, name, None)
        if isinstance(value, str) and value:
            return value
    return ""


def _usage(raw: Any, timings: Any) -> Usage | None:
    cached = 0
    if isinstance(timings, dict) and isinstance(timings.get("cache_n"), int):
        cached = timings["cache_n"]
    if raw is None:
        return Usage(cached_tokens=cached) if cached else None
    details = getattr(raw, "prompt_tokens_details", None)
    if details is not None and getattr(details, "cached_tokens", None):
        cached = details.cached_tokens
    prompt = raw.prompt_tokens or 0
    completion = raw.completion_tokens or 0
    return Usage(
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=raw.total_tokens or prompt + completion,
        cached_tokens=cached,
    )
