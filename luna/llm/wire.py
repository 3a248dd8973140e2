"""What goes on the wire to the model server: message normalization and text sanitizing.

Invariants:
- Every request Luna sends is valid UTF-8 JSON: lone surrogates (from undecodable input bytes
  or a model's broken output) become U+FFFD; llama-server rejects the whole request otherwise.
- Exactly one leading system message (later system messages are merged into it); ``""`` never
  ``null`` for content; tool calls in wire form with arguments that parse as a JSON object;
  ``reasoning_content`` only when it is a non-empty string (``null`` is an HTTP 500).
- ``sdk_kwargs`` puts exactly ``wire_body`` on the wire through the openai SDK.
- Pure functions, no I/O.
"""

from __future__ import annotations

import json
from typing import Any

from luna.llm.markup import defuse_chat_tokens
from luna.messages import ToolCall, clean_text, clean_value, new_call_id


def valid_arguments(raw: Any) -> tuple[str, str | None]:
    """(arguments as JSON-object text, problem or None) for a tool call's raw arguments.

    Servers parse history arguments as a JSON object and refuse the request otherwise, so a
    call whose arguments are cut off or garbage is replayed as ``{}``; the problem says why.
    """
    if isinstance(raw, dict):
        return json.dumps(raw, ensure_ascii=False), None
    text = raw if isinstance(raw, str) else ""
    if not text.strip():
        return "{}", None
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return "{}", "arguments are not valid JSON"
    if not isinstance(value, dict):
        return "{}", "arguments are not a JSON object"
    return text, None


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def _defused_part(part: Any) -> Any:
    if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
        return {**part, "text": defuse_chat_tokens(part["text"])}
    return part


def _wire_tool_call(tc: Any) -> dict[str, Any]:
    if isinstance(tc, ToolCall):
        tc = tc.to_wire()
    fn = dict(tc.get("function") or {})
    fn["name"] = str(fn.get("name") or "")
    fn["arguments"], _ = valid_arguments(fn.get("arguments"))
    return {"id": str(tc.get("id") or new_call_id()), "type": "function", "function": fn}


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
        reasoning = m.pop("reasoning_content", None)
        if role == "assistant":
            if isinstance(reasoning, str) and reasoning:
                m["reasoning_content"] = reasoning
            calls = m.get("tool_calls")
            if calls:
                m["tool_calls"] = [_wire_tool_call(tc) for tc in calls]
            else:
                m.pop("tool_calls", None)
        if role == "tool":
            m["tool_call_id"] = str(m.get("tool_call_id") or "")
        if role in ("user", "tool") and isinstance(m.get("content"), str):
            m["content"] = defuse_chat_tokens(m["content"])
        elif role in ("user", "tool") and isinstance(m.get("content"), list):
            m["content"] = [_defused_part(p) for p in m["content"]]
        rest.append(clean_value(m))
    if system:
        return [{"role": "system", "content": clean_text("\n\n".join(system))}, *rest]
    return rest


# Sent as extra_body, which the SDK puts on the wire as given: its typed-dict transform walks
# every message and tool declaration on each request, and with a long history that walk was
# half of the main thread's time between two turns (py-spy, 150 turns); Luna's messages are
# already plain JSON, so the transform has nothing to do.
_AS_GIVEN = ("messages", "tools", "tool_choice", "response_format")


def sdk_kwargs(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` as ``chat.completions.create`` arguments that put the same body on the wire."""
    kwargs = {k: v for k, v in params.items() if k not in _AS_GIVEN and k != "extra_body"}
    kwargs["messages"] = []  # required by the SDK's signature; replaced by extra_body's
    kwargs["extra_body"] = wire_body(params)  # the whole body; it takes precedence
    return kwargs


def wire_body(params: dict[str, Any]) -> dict[str, Any]:
    """The JSON body a request's parameters put on the wire (extra_body merged in)."""
    body = {k: v for k, v in params.items() if k not in ("extra_body", "timeout")}
    body.update(params.get("extra_body") or {})
    return body
