"""A scripted OpenAI-compatible LLM server for tests: real HTTP on 127.0.0.1, real wire format.

It plays llama.cpp's ``llama-server``: ``POST /v1/chat/completions`` (JSON or SSE streaming),
``GET /v1/models``, ``GET /props`` and ``GET /health``. Tests queue replies with
:meth:`FakeLLMServer.script` and assert on :attr:`FakeLLMServer.requests`.

Invariants:
- Replies are served in the order queued; when the queue is empty, ``server.default`` answers.
- Every request body received on ``/v1/chat/completions`` is recorded (also rejected ones).
- It refuses what the real llama-server (b11434, Qwen3.5 template) refuses, with the same
  status and error type, so client-side normalization is tested for real (each case is also
  sent to the real server by tests/llm/test_real_server.py): a system message that is not the
  first (500), ``reasoning_content: null`` (500), tool-call arguments that are not a JSON
  object (500), a lone surrogate in the JSON body (400), and a prompt longer than ``n_ctx``
  (400 ``exceed_context_size_error`` with ``n_prompt_tokens`` and ``n_ctx``).
- ``usage`` is computed from rough token counts when a reply does not give one; cached tokens
  are the common prefix with the previous request (like llama.cpp's prompt cache).

Standalone: ``python -m tests.fakes.llm_server --port 0 --script replies.json`` prints
``READY http://127.0.0.1:PORT/v1`` on stdout and serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import signal
import sys
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_MODEL = "fake-model"
DEFAULT_N_CTX = 8192


@dataclass
class Reply:
    """One scripted answer.

    ``tool_calls`` items are ``{"name": str, "arguments": "<json text>" | dict, "id": optional}``.
    ``chunks`` (optional) gives the exact streamed content pieces; otherwise content is split
    into pieces of ``chunk_size`` characters. ``status`` != 200 answers with ``error_body``
    (or a llama.cpp-style error object). ``abort_after`` makes a stream stop abruptly (no
    finish_reason, no ``[DONE]``) after that many SSE events, like a crashed server.
    """

    content: str = ""
    reasoning: str = ""
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    delay: float = 0.0
    chunk_delay: float = 0.0
    status: int = 200
    error_body: Any = None
    usage: dict[str, Any] | None = None
    finish_reason: str | None = None
    chunks: list[str] | None = None
    chunk_size: int = 4
    headers: dict[str, str] = field(default_factory=dict)
    abort_after: int | None = None  # streaming: drop the connection after this many events
    drop: bool = False  # close the connection without any answer (as a closed keep-alive)
    pings: int = 0  # streaming: SSE keep-alive comments sent before the first chunk
    ping_interval: float = 0.0
    raw_bytes: bytes | None = None  # streaming: sent as one SSE data line instead of content
    timings: dict[str, Any] | None = None  # llama-server timings to report (default: from usage)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Reply:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


ReplySource = Reply | Callable[[dict[str, Any]], Reply]


def rough_tokens(text: str) -> int:
    """About four characters per token, at least one for non-empty text."""
    return (len(text) + 3) // 4


class _Server(ThreadingHTTPServer):
    # socketserver listens with a backlog of 5: twenty clients connecting at once (the web
    # load test) overflowed it and some connections were reset after a 1 s SYN retry.
    request_queue_size = 128


class FakeLLMServer:
    """The scripted server; use as a context manager or call start()/stop()."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        model: str = DEFAULT_MODEL,
        n_ctx: int = DEFAULT_N_CTX,
        props: bool = True,
    ) -> None:
        self.model = model
        self.n_ctx = n_ctx
        self.has_props = props
        self.preserves_reasoning = True
        # /props' chat_template_caps.supports_tool_calls (None: left out, as a server whose
        # template caps do not say)
        self.supports_tool_calls: bool | None = None
        self.total_slots = 1
        self.vision = False  # /props' modalities.vision (a server started with --mmproj)
        self.default: ReplySource = Reply(content="ok")
        # Text that makes the server refuse any request (and render) carrying it, with HTTP
        # 500: a stand-in for a history the server's template cannot take.
        self.poison: str | None = None
        self._queue: deque[ReplySource] = deque()
        self._requests: list[dict[str, Any]] = []
        self._headers: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._last_prompt = ""
        self._httpd = _Server((host, port), _make_handler(self))
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    # ---- lifecycle ------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.root_url}/v1"

    def start(self) -> FakeLLMServer:
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            # how long stop() waits for the loop to notice (every test stops one)
            kwargs={"poll_interval": 0.005},
            name="fake-llm-server",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- scripting ------------------------------------------------------------------------
    def script(self, *replies: ReplySource) -> None:
        """Queue replies (Reply objects or callables taking the request body)."""
        with self._lock:
            self._queue.extend(replies)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """A snapshot of the chat request bodies received so far."""
        with self._lock:
            return list(self._requests)

    @property
    def headers(self) -> list[dict[str, str]]:
        """Headers (lower-case names) of each chat request, in the order of requests."""
        with self._lock:
            return list(self._headers)

    @property
    def pending(self) -> int:
        """Scripted replies not yet served."""
        with self._lock:
            return len(self._queue)

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self._requests.clear()
            self._headers.clear()
            self._last_prompt = ""
            self.default = Reply(content="ok")

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> list[dict[str, Any]]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            reqs = self.requests
            if len(reqs) >= n:
                return reqs
            time.sleep(0.01)
        raise TimeoutError(f"fake LLM server got {len(self.requests)} requests, wanted {n}")

    # ---- internals ------------------------------------------------------------------------
    def _record(self, body: dict[str, Any], headers: dict[str, str]) -> None:
        with self._lock:
            self._requests.append(body)
            self._headers.append(headers)

    def _next_reply(self, body: dict[str, Any]) -> tuple[Reply, int]:
        """The next scripted reply (a refused request never reaches the model: none is used)."""
        with self._lock:
            source = self._queue.popleft() if self._queue else self.default
            prompt = json.dumps(body.get("messages"), ensure_ascii=False) + json.dumps(
                body.get("tools") or [], ensure_ascii=False
            )
            common = common_prefix_length(prompt, self._last_prompt)
            self._last_prompt = prompt
        reply = source(body) if callable(source) else source
        return reply, common // 4


class _Aborted(Exception):
    """Raised inside the handler to cut a scripted stream short."""


def validate_messages(body: dict[str, Any]) -> str | None:
    """The HTTP 500 message llama-server with the Qwen3.5 template gives, or None."""
    return _template_problem(body.get("messages"))


def _template_problem(messages: Any) -> str | None:
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            return f"message {i} has no role"
        if m["role"] == "system" and i != 0:
            return "Jinja Exception: System message must be at the beginning."
        if "reasoning_content" in m and not isinstance(m["reasoning_content"], str):
            return "Failed to parse messages: reasoning_content must be a string"
        for call in m.get("tool_calls") or []:
            args = (call.get("function") or {}).get("arguments")
            try:
                ok = isinstance(json.loads(args), dict) if isinstance(args, str) else False
            except json.JSONDecodeError:
                ok = False
            if not ok:
                return "Failed to parse tool call arguments as JSON"
    return None


def common_prefix_length(a: str, b: str) -> int:
    """Characters ``a`` and ``b`` share from the start (slice comparisons, bisected: the
    scripted server must answer at once, and a per-character loop over a long prompt did not)."""
    low, high = 0, min(len(a), len(b))
    while low < high:
        mid = (low + high + 1) // 2
        if a[:mid] == b[:mid]:
            low = mid
        else:
            high = mid - 1
    return low


_SURROGATE = re.compile("[\ud800-\udfff]")


def has_lone_surrogate(value: Any) -> bool:
    """A string holding an unpaired surrogate, anywhere in the decoded body (llama-server: 400).

    ``json.loads`` joins valid ``\\ud83d\\ude00`` pairs into one character and leaves lone ones.
    """
    if isinstance(value, str):
        return _SURROGATE.search(value) is not None
    if isinstance(value, list):
        return any(has_lone_surrogate(v) for v in value)
    if isinstance(value, dict):
        return any(has_lone_surrogate(k) or has_lone_surrogate(v) for k, v in value.items())
    return False


def context_error(n_prompt: int, n_ctx: int) -> dict[str, Any]:
    """llama-server's answer to a prompt that does not fit its context."""
    return {
        "error": {
            "code": 400,
            "message": f"request ({n_prompt} tokens) exceeds the available context size "
            f"({n_ctx} tokens), try increasing it",
            "type": "exceed_context_size_error",
            "n_prompt_tokens": n_prompt,
            "n_ctx": n_ctx,
        }
    }


def loading_error() -> dict[str, Any]:
    """llama-server's answer while it loads the model (HTTP 503)."""
    return {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}


def _tool_call_wire(tc: dict[str, Any], i: int) -> dict[str, Any]:
    args = tc.get("arguments", "{}")
    if not isinstance(args, str):
        args = json.dumps(args)
    return {
        "id": tc.get("id") or f"call_{i}_{uuid.uuid4().hex[:8]}",
        "type": "function",
        "function": {"name": tc["name"], "arguments": args},
    }


def image_parts(messages: Any) -> int:
    """How many ``image_url`` parts the request's messages carry."""
    return sum(
        1
        for m in (messages if isinstance(messages, list) else [])
        if isinstance(m, dict) and isinstance(m.get("content"), list)
        for p in m["content"]
        if isinstance(p, dict) and p.get("type") == "image_url"
    )


def _sized(messages: Any) -> Any:
    """The messages with each image as about 256 tokens of text (as llama-server counts a
    Gemma 3 image), not its base64."""
    if not image_parts(messages):
        return messages
    stand_in = {"type": "image_url", "image_url": {"url": "x" * 1024}}
    return [
        {**m, "content": [stand_in if p.get("type") == "image_url" else p for p in m["content"]]}
        if isinstance(m.get("content"), list)
        else m
        for m in messages
    ]


def _usage(reply: Reply, body: dict[str, Any], cached: int) -> dict[str, Any]:
    if reply.usage is not None:
        return dict(reply.usage)
    prompt = rough_tokens(json.dumps(_sized(body.get("messages")), ensure_ascii=False))
    prompt += rough_tokens(json.dumps(body.get("tools") or []))
    completion = rough_tokens(reply.content) + rough_tokens(reply.reasoning)
    completion += sum(rough_tokens(json.dumps(tc)) for tc in reply.tool_calls)
    cached = min(cached, prompt)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
    }


def _make_handler(server: FakeLLMServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # small SSE writes on a kept-alive connection: no waits

        def log_message(self, format: str, *args: Any) -> None:  # quiet
            pass

        # -- helpers
        def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def _error(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
            kind = "server_error" if status >= 500 else "invalid_request_error"
            self._json(
                status, {"error": {"code": status, "message": message, "type": kind}}, headers
            )

        # -- routes
        def do_GET(self) -> None:  # http.server API
            path = self.path.split("?")[0].rstrip("/")
            if path in ("/v1/models", "/models"):
                self._json(
                    200,
                    {
                        "object": "list",
                        "data": [{"id": server.model, "object": "model", "owned_by": "fake"}],
                    },
                )
            elif path == "/props" and server.has_props:
                self._json(
                    200,
                    {
                        "default_generation_settings": {"n_ctx": server.n_ctx},
                        "total_slots": server.total_slots,
                        "model_path": f"/models/{server.model}.gguf",
                        "modalities": {"vision": server.vision, "audio": False},
                        # as llama-server reports Luna's template (the stock one says False)
                        "chat_template_caps": {
                            "supports_preserve_reasoning": server.preserves_reasoning,
                            **(
                                {}
                                if server.supports_tool_calls is None
                                else {"supports_tool_calls": server.supports_tool_calls}
                            ),
                        },
                    },
                )
            elif path == "/health":
                self._json(200, {"status": "ok"})
            else:
                self._error(404, f"File Not Found: {path}")

        def do_POST(self) -> None:  # http.server API
            path = self.path.split("?")[0].rstrip("/")
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if path == "/apply-template":
                self._apply_template(raw)
                return
            if path not in ("/v1/chat/completions", "/chat/completions"):
                self._error(404, f"File Not Found: {path}")
                return
            try:
                body = json.loads(raw or b"{}")
            except (json.JSONDecodeError, UnicodeDecodeError):
                self._error(400, "request body is not valid JSON")
                return
            server._record(body, {k.lower(): v for k, v in self.headers.items()})
            if has_lone_surrogate(body):
                self._error(400, "invalid string: surrogate must be a pair")
                return
            problem = validate_messages(body) or self._poisoned(body)
            if not problem and not server.vision and image_parts(body.get("messages")):
                # llama-server without --mmproj, word for word
                problem = (
                    "image input is not supported - hint: if this is unexpected, you may need "
                    "to provide the mmproj"
                )
            if problem:
                self._error(500, problem)
                return
            n_prompt = _usage(Reply(), body, 0)["prompt_tokens"]
            if n_prompt >= server.n_ctx:
                self._json(400, context_error(n_prompt, server.n_ctx))
                return
            reply, cached = server._next_reply(body)
            if reply.drop:
                self.close_connection = True
                return
            if reply.delay:
                time.sleep(reply.delay)
            if reply.status != 200:
                if reply.error_body is not None:
                    self._json(reply.status, reply.error_body, reply.headers)
                else:
                    self._error(reply.status, f"scripted error {reply.status}", reply.headers)
                return
            try:
                if body.get("stream"):
                    self._stream(body, reply, cached)
                else:
                    self._complete(body, reply, cached)
            except _Aborted:
                self.close_connection = True
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client went away (cancelled or timed out)

        def _poisoned(self, body: dict[str, Any]) -> str | None:
            if server.poison and server.poison in json.dumps(body, ensure_ascii=False):
                return "Jinja Exception: scripted refusal"
            return None

        def _apply_template(self, raw: bytes) -> None:
            """Renders the messages as plain text, refusing what chat requests refuse."""
            try:
                body = json.loads(raw or b"{}")
            except json.JSONDecodeError:
                self._error(400, "request body is not valid JSON")
                return
            problem = validate_messages(body) or self._poisoned(body)
            if not problem and not server.vision and image_parts(body.get("messages")):
                # llama-server without --mmproj, word for word
                problem = (
                    "image input is not supported - hint: if this is unexpected, you may need "
                    "to provide the mmproj"
                )
            if problem:
                self._error(500, problem)
                return
            prompt = "".join(
                f"<{m['role']}>{m.get('content') or ''}</{m['role']}>" for m in body["messages"]
            )
            self._json(200, {"prompt": prompt})

        def _complete(self, body: dict[str, Any], reply: Reply, cached: int) -> None:
            message: dict[str, Any] = {"role": "assistant", "content": reply.content}
            if reply.reasoning:
                message["reasoning_content"] = reply.reasoning
            if reply.tool_calls:
                message["tool_calls"] = [
                    _tool_call_wire(tc, i) for i, tc in enumerate(reply.tool_calls)
                ]
            finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
            usage = _usage(reply, body, cached)
            self._json(
                200,
                {
                    "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model") or server.model,
                    "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                    "usage": usage,
                    "timings": reply.timings
                    or {"cache_n": usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)},
                },
            )

        def _stream(self, body: dict[str, Any], reply: Reply, cached: int) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            # Chunked, so the connection stays open for the next request as with llama-server
            # (a connection per request was a third of the scripted server's answer time).
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            cid = f"chatcmpl-{uuid.uuid4().hex[:12]}"

            def write(data: bytes) -> None:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()

            model = body.get("model") or server.model

            def chunk(delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
                obj = {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": int(time.time()),
                    "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                    **extra,
                }
                send(obj)

            sent = [0]

            def send(obj: Any) -> None:
                if reply.abort_after is not None and sent[0] >= reply.abort_after:
                    raise _Aborted
                sent[0] += 1
                data = obj if isinstance(obj, str) else json.dumps(obj)
                write(f"data: {data}\n\n".encode())
                if reply.chunk_delay:
                    time.sleep(reply.chunk_delay)

            def pieces(text: str) -> list[str]:
                n = max(1, reply.chunk_size)
                return [text[i : i + n] for i in range(0, len(text), n)]

            for _ in range(reply.pings):
                write(b": ping\n\n")
                time.sleep(reply.ping_interval)
            chunk({"role": "assistant", "content": None})
            if reply.raw_bytes is not None:  # e.g. invalid UTF-8 inside a content delta
                write(
                    b'data: {"id":"x","object":"chat.completion.chunk","created":0,'
                    b'"model":"m","choices":[{"index":0,"delta":{"content":"'
                    + reply.raw_bytes
                    + b'"},"finish_reason":null}]}\n\n'
                )
            for piece in pieces(reply.reasoning):
                chunk({"reasoning_content": piece})
            for piece in reply.chunks if reply.chunks is not None else pieces(reply.content):
                chunk({"content": piece})
            for i, tc in enumerate(reply.tool_calls):
                wire = _tool_call_wire(tc, i)
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": i,
                                "id": wire["id"],
                                "type": "function",
                                "function": {"name": wire["function"]["name"], "arguments": ""},
                            }
                        ]
                    }
                )
                for piece in pieces(wire["function"]["arguments"]):
                    chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
            finish = reply.finish_reason or ("tool_calls" if reply.tool_calls else "stop")
            usage = _usage(reply, body, cached)
            cache_n = usage.get("prompt_tokens_details", {}).get("cached_tokens", 0)
            chunk({}, finish, timings=reply.timings or {"cache_n": cache_n})
            if (body.get("stream_options") or {}).get("include_usage"):
                send(
                    {
                        "id": cid,
                        "object": "chat.completion.chunk",
                        "created": int(time.time()),
                        "model": model,
                        "choices": [],
                        "usage": usage,
                    }
                )
            send("[DONE]")
            self.wfile.write(b"0\r\n\r\n")  # the last chunk: the stream is complete
            self.wfile.flush()

    return Handler


def load_script(path: str) -> list[Reply]:
    """A JSON file holding a list of Reply field dicts."""
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
    if not isinstance(data, list):
        raise SystemExit(f"{path}: expected a JSON list of replies")
    return [Reply.from_dict(d) for d in data]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Scripted OpenAI-compatible fake LLM server.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--script", help="JSON file: list of replies served in order")
    parser.add_argument("--default", default="ok", help="content of the default reply")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    args = parser.parse_args(argv)
    server = FakeLLMServer(args.host, args.port, model=args.model)
    server.default = Reply(content=args.default)
    if args.script:
        server.script(*load_script(args.script))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    server.start()
    print(f"READY {server.url}", flush=True)
    stop.wait()
    server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
