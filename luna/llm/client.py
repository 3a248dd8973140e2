"""The LLM client: the only code that talks to the model (an OpenAI-compatible endpoint).

Job: send chat requests (plain or streaming, with tools) to llama-server or any
OpenAI-compatible server and return a structured :class:`~luna.messages.LLMResponse`.

Invariants:
- Every request goes through :func:`luna.llm.wire.normalize_messages` (valid UTF-8, one system
  message, tool-call arguments that parse as JSON objects, no ``null`` content or reasoning).
- Failures are retried by :func:`luna.llm.retrying.with_retries` (connection errors, 429,
  502-504, a model still loading); a stream only before it has produced anything.
- Other refusals are not retried: HTTP 400 ``exceed_context_size_error`` becomes
  ``LLMContextOverflowError`` (with the server's token counts), other 4xx and HTTP 500 become
  ``LLMRejectedError``: the same request would fail the same way.
- ``llm.timeout`` bounds the whole response, keep-alive comments included; a stream must
  start (first byte, llama-server's prompt progress counts) within ``llm.first_byte_timeout``.
- Every openai/httpx exception is translated once, by ``luna.llm.failures``, into one line
  naming the URL and the fix.
- An image part reaches a server only when its ``/props`` reports vision; any other server
  gets a line in its place (llama-server without ``--mmproj`` answers it with HTTP 500).
- Leaked ``<think>`` / tool-call markup never reaches the caller (see ``luna.llm.markup``).
- One ``llm_call`` event is logged per call. The API key only travels in the Authorization
  header.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai

from luna.config import LLMConfig
from luna.errors import LLMError, LLMRejectedError
from luna.llm.contract import ProgressCallback, RequestRecorder, TextCallback
from luna.llm.failures import translate
from luna.llm.markup import StreamFilter, clean_reply
from luna.llm.retrying import with_retries
from luna.llm.server_info import ServerInfo
from luna.llm.slots import SlotPlan, has_background_slot
from luna.llm.stream import StreamAccumulator, reasoning_of, usage_of
from luna.llm.transport import Utf8RepairingTransport
from luna.llm.vision import count_images, text_of, without_images
from luna.llm.wire import normalize_messages, sdk_kwargs, wire_body
from luna.messages import LLMResponse, ToolCall, Usage, new_call_id
from luna.observe import log_event

_log = logging.getLogger(__name__)

NO_KEY = "sk-no-key-required"


# ---- the client ----------------------------------------------------------------------------


class LLMClient:
    """Chat with an OpenAI-compatible endpoint; see the module docstring for invariants."""

    def __init__(self, cfg: LLMConfig) -> None:
        self.cfg = cfg
        self.endpoint = cfg.endpoint.rstrip("/")
        self.root_url = self.endpoint.removesuffix("/v1")
        self.model = cfg.model
        self._timeout = httpx.Timeout(cfg.timeout, connect=cfg.connect_timeout)
        self._stream_timeout = httpx.Timeout(cfg.first_byte_timeout, connect=cfg.connect_timeout)
        self._http = httpx.AsyncClient(
            timeout=self._timeout, trust_env=False, transport=Utf8RepairingTransport()
        )
        self._client = openai.AsyncOpenAI(
            base_url=self.endpoint,
            api_key=cfg.api_key or NO_KEY,
            max_retries=0,
            # openai 3.x takes an httpx client as well as an httpx2 one (is_legacy_httpx_*
            # in its _base_client), but its annotations name only httpx2's types.
            timeout=self._timeout,  # type: ignore[arg-type]
            http_client=self._http,  # type: ignore[arg-type]
        )
        self._info: ServerInfo | None = None
        self._info_checked = False
        self._slots: SlotPlan | None = None

    async def close(self) -> None:
        await self._client.close()
        await self._http.aclose()

    # -- server facts (llama-server only)
    async def server_info(
        self, *, refresh: bool = False, lane: str | None = None
    ) -> ServerInfo | None:
        """llama-server's ``/props`` facts, fetched once; None for other servers or when down.

        (``lane`` matters only to the router, which shares this interface.)"""
        if self._info_checked and not refresh:
            return self._info
        headers = {"Authorization": f"Bearer {self.cfg.api_key}"} if self.cfg.api_key else {}
        try:
            r = await self._http.get(f"{self.root_url}/props", headers=headers, timeout=10.0)
            props = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return self._info  # unknown for now; ask again next time
        self._info_checked = True
        is_llama = isinstance(props, dict) and "default_generation_settings" in props
        self._info = ServerInfo.from_props(props) if is_llama and props else None
        return self._info

    @property
    def known_info(self) -> ServerInfo | None:
        """``/props`` facts as last fetched, without asking the server."""
        return self._info

    async def can_see(self, lane: str | None = None) -> bool:
        """Whether this server takes images (its ``/props`` reports vision)."""
        info = await self.server_info()
        return info is not None and info.has_vision

    async def leaves_sessions_alone(self) -> bool:
        """Whether background work here runs on a slot of its own (``luna.llm.slots``)."""
        return has_background_slot(await self.server_info(), self.cfg.pin_slots)

    async def render(
        self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> str:
        """The prompt text llama-server makes of a request (``/apply-template``, no generation).

        Raises LLMRejectedError when the server's template refuses the messages.
        """
        body: dict[str, Any] = {"messages": await self._seeable(normalize_messages(messages))}
        if tools:
            body["tools"] = tools
        body.update(await self._extra_body())
        headers = {"Authorization": f"Bearer {self.cfg.api_key}"} if self.cfg.api_key else {}
        try:
            r = await self._http.post(f"{self.root_url}/apply-template", json=body, headers=headers)
        except httpx.HTTPError as e:
            raise self._translate(e) from e
        if r.status_code != 200:
            try:
                err = r.json().get("error") or {}
            except ValueError:
                err = {}
            message = str(err.get("message") or r.reason_phrase)[:200]
            raise LLMRejectedError(
                f"the LLM at {self.endpoint} cannot render this history: {message}",
                status=r.status_code,
            )
        return str(r.json().get("prompt", ""))

    # -- public calls
    async def chat(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        *,
        temperature: float | None = None,
        max_tokens: int | None = None,
        response_format: dict[str, Any] | None = None,
        tool_choice: str | None = None,
        on_status: TextCallback | None = None,
        record: RequestRecorder | None = None,
        lane: str | None = None,
    ) -> LLMResponse:
        """One non-streaming completion (``lane``: the session it serves; None = background)."""
        params = await self._params(
            messages, tools, temperature, max_tokens, response_format, tool_choice, lane
        )
        start = time.perf_counter()
        try:
            async with asyncio.timeout(self.cfg.timeout):
                raw = await with_retries(
                    lambda: self._client.chat.completions.create(**sdk_kwargs(params)),
                    self.cfg,
                    self._translate,
                    on_status,
                )
        except TimeoutError as e:
            err = self._timed_out()
            await self._failed(params, start, err, record, stream=False)
            raise err from e
        except LLMError as e:
            await self._failed(params, start, e, record, stream=False)
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
            reasoning=reasoning_of(msg),
            calls=calls,
            tools=tools,
            finish_reason=choice.finish_reason if choice else None,
            usage=usage_of(raw.usage, getattr(raw, "timings", None)),
            model=raw.model or self.model,
            start=start,
            untrusted=_untrusted_texts(messages),
        )
        self._log_call(response, start, stream=False)
        if record is not None:
            await record(wire_body(params), response, None)
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
        on_progress: ProgressCallback | None = None,
        on_status: TextCallback | None = None,
        response_format: dict[str, Any] | None = None,
        tool_choice: str | None = None,
        record: RequestRecorder | None = None,
        lane: str | None = None,
    ) -> LLMResponse:
        """A streaming completion; text, reasoning and prompt progress go to the callbacks.

        ``lane`` names the session the request serves (its server slot is kept for it);
        None means background work.
        """
        params = await self._params(
            messages, tools, temperature, max_tokens, response_format, tool_choice, lane
        )
        params["stream"] = True
        params["stream_options"] = {"include_usage": True}
        params["timeout"] = self._stream_timeout
        if await self.server_info() is not None:
            params.setdefault("extra_body", {})["return_progress"] = True
        start = time.perf_counter()
        untrusted = _untrusted_texts(messages)
        acc = StreamAccumulator(model=self.model, filter=StreamFilter(untrusted=untrusted))
        try:
            async with asyncio.timeout(self.cfg.timeout):
                await self._consume(params, acc, on_text, on_reasoning, on_progress, on_status)
        except TimeoutError as e:
            err = self._timed_out()
            await self._failed(params, start, err, record, stream=True)
            raise err from e
        except LLMError as e:
            await self._failed(params, start, e, record, stream=True)
            raise
        if acc.finish_reason is None:
            err = LLMError(
                f"the stream from the LLM at {self.endpoint} ended before the reply was complete"
            )
            await self._failed(params, start, err, record, stream=True)
            raise err
        response = self._finish(
            content="".join(acc.content),
            reasoning="".join(acc.reasoning),
            calls=acc.tool_calls(),
            tools=tools,
            finish_reason=acc.finish_reason,
            usage=acc.usage(),
            model=acc.model,
            start=start,
            untrusted=untrusted,
        )
        if on_text and not acc.filter.released and response.content and not response.tool_calls:
            await on_text(response.content)  # reasoning fallback: the user must see something
        self._log_call(response, start, stream=True)
        if record is not None:
            await record(wire_body(params), response, None)
        return response

    async def _failed(
        self,
        params: dict[str, Any],
        start: float,
        error: LLMError,
        record: RequestRecorder | None,
        *,
        stream: bool,
    ) -> None:
        self._log_call(None, start, stream=stream, error=error)
        if record is not None:
            await record(wire_body(params), None, error)

    async def _consume(
        self,
        params: dict[str, Any],
        acc: StreamAccumulator,
        on_text: TextCallback | None,
        on_reasoning: TextCallback | None,
        on_progress: ProgressCallback | None,
        on_status: TextCallback | None,
    ) -> None:
        stream = await with_retries(
            lambda: self._client.chat.completions.create(**sdk_kwargs(params)),
            self.cfg,
            self._translate,
            on_status,
        )
        try:
            async for chunk in _chunks(stream):
                shown = acc.feed(chunk)
                if shown.progress is not None and on_progress:
                    await on_progress(shown.progress)
                if shown.reasoning and on_reasoning:
                    await on_reasoning(shown.reasoning)
                if shown.text and on_text:
                    await on_text(shown.text)
            tail = acc.flush()
            if tail.text and on_text:
                await on_text(tail.text)
            if tail.reasoning and on_reasoning:
                await on_reasoning(tail.reasoning)
        except (openai.APIError, httpx.HTTPError) as e:
            raise self._translate(e) from e
        finally:
            await stream.close()

    # -- internals
    async def _extra_body(self, lane: str | None = None) -> dict[str, Any]:
        """llama-server-only request fields (other servers may refuse unknown ones)."""
        info = await self.server_info()
        if info is None:
            return {}
        keep = self.cfg.history_reasoning == "keep"
        extra: dict[str, Any] = {"chat_template_kwargs": {"preserve_reasoning": keep}}
        if self.cfg.pin_slots and info.total_slots and info.total_slots >= 2:
            if self._slots is None or self._slots.total != info.total_slots:
                self._slots = SlotPlan(info.total_slots)
            extra["id_slot"] = self._slots.slot(lane)
        return extra

    async def _params(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        temperature: float | None,
        max_tokens: int | None,
        response_format: dict[str, Any] | None,
        tool_choice: str | None,
        lane: str | None = None,
    ) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "messages": await self._seeable(normalize_messages(messages)),
            "temperature": self.cfg.temperature if temperature is None else temperature,
            "max_tokens": self.cfg.max_tokens if max_tokens is None else max_tokens,
        }
        if self.cfg.stop:
            params["stop"] = list(self.cfg.stop)
        if tools:
            params["tools"] = tools
            if tool_choice is not None:
                params["tool_choice"] = tool_choice
        if response_format is not None:
            params["response_format"] = response_format
        extra = await self._extra_body(lane)
        if extra and self.cfg.grammar and not tools and response_format is None:
            extra["grammar"] = self.cfg.grammar  # llama-server refuses a grammar beside tools
        if extra:
            params["extra_body"] = extra
        return params

    async def _seeable(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """``messages`` as this server can take them: image parts only when it reports vision
        (the agent renders for the session's server; this covers a failover to another)."""
        images = count_images(messages)
        if not images:
            return messages
        info = await self.server_info()
        if info is not None and info.has_vision:
            return messages
        _log.warning("the LLM at %s cannot see images; %d withheld", self.endpoint, images)
        log_event("llm_images_withheld", endpoint=self.endpoint, count=images)
        return without_images(messages)

    def _timed_out(self) -> LLMError:
        return LLMError(
            f"the LLM at {self.endpoint} did not finish within {self.cfg.timeout:g}s "
            "(llm.timeout; raise it in config.toml for slow models)"
        )

    def _translate(self, exc: BaseException) -> LLMError:
        return translate(exc, self.endpoint, self.cfg.first_byte_timeout)

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
        untrusted: list[str],
    ) -> LLMResponse:
        text, thought, recovered, fallback = clean_reply(
            content, reasoning, tools, untrusted=untrusted
        )
        if fallback and calls:  # real tool calls: no need to show the reasoning as the reply
            text = ""
        if recovered:
            _log.info("recovered %d tool call(s) written as text", len(recovered))
            log_event("tool_calls_recovered", count=len(recovered))
            if not calls and finish_reason == "stop":
                finish_reason = "tool_calls"
        return LLMResponse(
            content=text,
            reasoning=reasoning or thought,
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
            prefilled_tokens=usage.prefilled_tokens if usage else None,
            prompt_ms=round(usage.prompt_ms, 1) if usage else None,
            latency_ms=round((time.perf_counter() - start) * 1000, 1),
            stream=stream,
            finish_reason=response.finish_reason if response else None,
            tool_calls=len(response.tool_calls) if response else 0,
            error=str(error) if error else None,
            error_type=type(error).__name__ if error else None,
        )


def _untrusted_texts(messages: list[dict[str, Any]]) -> list[str]:
    """Prompt text that came from tools or the web: markup copied from it is never a call."""
    return [text_of(m.get("content")) for m in messages if m.get("role") == "tool"]


async def _chunks(stream: Any) -> AsyncIterator[Any]:
    """The stream's chunks; a chunk that fails to decode (not UTF-8, not JSON) ends the stream
    as an LLM error."""
    iterator = stream.__aiter__()
    while True:
        try:
            chunk = await iterator.__anext__()
        except StopAsyncIteration:
            return
        except UnicodeDecodeError as e:  # invalid UTF-8 from the server
            raise LLMError(f"the LLM sent text that is not UTF-8 ({e.reason})") from e
        except ValueError as e:  # a data line that is not JSON (json.JSONDecodeError)
            raise LLMError(f"the LLM sent a stream event that is not valid JSON ({e})") from e
        yield chunk
