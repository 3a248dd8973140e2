"""What a failed LLM call means: retry it, wait for a loading model, or say why in one line.

Every openai/httpx exception is translated here, once, into a :class:`~luna.errors.LLMError`
that names the URL and the fix. Decisions use exception types, HTTP status codes and
llama-server's structured error ``type``, never the wording of a message.
"""

from __future__ import annotations

import math
import socket
from typing import Any

import httpx
import openai

from luna.errors import LLMContextOverflowError, LLMError, LLMRejectedError, LLMUnreachableError

MAX_RETRY_AFTER = 30.0  # a server asking for longer is capped: the caller has a deadline
RETRY_STATUS = frozenset({429, 502, 503, 504})


def root_causes(exc: BaseException) -> list[BaseException]:
    """exc and everything it was raised from, outermost first."""
    seen: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in seen:
        seen.append(cur)
        cur = cur.__cause__ or cur.__context__
    return seen


def connect_reason(exc: BaseException) -> str | None:
    """Why a connection failed, or None if exc is not a connection failure."""
    chain = root_causes(exc)
    if any(isinstance(e, httpx.ConnectTimeout) for e in chain):
        return "connection timed out"
    if not any(isinstance(e, httpx.ConnectError) for e in chain):
        return None
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return "connection refused"
    if any(isinstance(e, socket.gaierror) for e in chain):
        return "host name not found"
    return "connection failed"


def _error_object(exc: openai.APIStatusError) -> dict[str, Any]:
    body = exc.body
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict):
            return err
        return {"message": str(err)}
    return {}


def _status_message(exc: openai.APIStatusError) -> str:
    msg = _error_object(exc).get("message")
    return str(msg)[:200] if msg else (exc.response.reason_phrase or "error")


def is_loading(exc: BaseException) -> bool:
    """llama-server's 503 while it loads the model (``type: unavailable_error``)."""
    return (
        isinstance(exc, openai.APIStatusError)
        and exc.status_code == 503
        and _error_object(exc).get("type") == "unavailable_error"
    )


def is_retryable(exc: BaseException) -> bool:
    """A failure the same request may not meet again: connection, 429, 502, 503, 504, and a
    server that closed the connection before answering (a kept-alive connection it had just
    closed: the request never reached it). Asked only before any of the answer arrived."""
    if isinstance(exc, openai.APIStatusError):
        return exc.status_code in RETRY_STATUS
    disconnected = any(isinstance(e, httpx.RemoteProtocolError) for e in root_causes(exc))
    return disconnected or connect_reason(exc) is not None


def is_stale_connection(exc: BaseException) -> bool:
    """The server closed a kept-alive connection just as the request went out on it (the real
    llama-server does this to about one request in fifty here): a new connection at once
    will do, no backoff is needed. Asked only before any of the answer arrived."""
    chain = root_causes(exc)
    return any(isinstance(e, httpx.RemoteProtocolError) for e in chain) and not any(
        isinstance(e, httpx.ConnectError | httpx.ConnectTimeout) for e in chain
    )


def retry_after(exc: BaseException) -> float | None:
    """The server's Retry-After in seconds (capped), or None."""
    if isinstance(exc, openai.APIStatusError):
        value = exc.response.headers.get("retry-after")
        try:
            seconds = float(value) if value else None
        except ValueError:
            return None
        if seconds is None or not math.isfinite(seconds) or seconds < 0:
            return None  # "soon", "nan", "-1": the usual backoff instead
        return min(seconds, MAX_RETRY_AFTER)
    return None


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def translate(exc: BaseException, endpoint: str, first_byte_timeout: float) -> LLMError:
    """The one-line Luna error for an openai/httpx failure talking to ``endpoint``."""
    reason = connect_reason(exc)
    if reason is not None:
        return LLMUnreachableError(
            f"cannot reach the LLM at {endpoint}: {reason} — start llama-server or set "
            "LLM_ENDPOINT / [llm] endpoint in config.toml"
        )
    if isinstance(exc, openai.APIStatusError):
        return _translate_status(exc, endpoint)
    chain = root_causes(exc)
    if any(isinstance(e, httpx.RemoteProtocolError) for e in chain):
        # The server closed the connection inside its answer (an incomplete chunked body: it
        # crashed, was killed or restarted mid-reply).
        return LLMError(
            f"the stream from the LLM at {endpoint} ended before the reply was complete "
            "(the server closed the connection; is it still running?)"
        )
    if any(isinstance(e, httpx.TimeoutException | openai.APITimeoutError) for e in chain):
        return LLMError(
            f"the LLM at {endpoint} sent nothing for {first_byte_timeout:g}s "
            "(llm.first_byte_timeout; raise it for very long prompts)"
        )
    cause = chain[-1]  # the SDK's "Connection error." says less than what it wraps
    detail = f"{type(cause).__name__}: {cause}" if str(cause) else type(cause).__name__
    return LLMError(f"the LLM call to {endpoint} failed: {detail}")


def _translate_status(exc: openai.APIStatusError, endpoint: str) -> LLMError:
    err = _error_object(exc)
    status = exc.status_code
    text = f"the LLM at {endpoint} answered HTTP {status}: {_status_message(exc)}"
    if status == 400 and err.get("type") == "exceed_context_size_error":
        return LLMContextOverflowError(
            text,
            n_prompt_tokens=_int_or_none(err.get("n_prompt_tokens")),
            n_ctx=_int_or_none(err.get("n_ctx")),
        )
    if status in (401, 403):
        return LLMError(f"{text} — check LLM_API_KEY")
    if status == 404:
        return LLMError(f"{text} — check that [llm] endpoint ends with /v1 and [llm] model")
    if status in (400, 422, 500):
        return LLMRejectedError(text, status=status)
    return LLMError(text)
