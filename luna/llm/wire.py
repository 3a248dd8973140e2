"""What goes on the wire to the model server: message normalization and text sanitizing.

Invariants:
- Every request Luna sends is valid UTF-8 JSON: lone surrogates (from undecodable input bytes
  or a model's broken output) become U+FFFD; llama-server rejects the whole request otherwise.
- Exactly one leading system message (later system messages are merged into it); ``""`` never
  ``null`` for content; tool calls in wire form with arguments that parse as a JSON object;
  ``reasoning_content`` only when it is a non-empty string (``null`` is an HTTP 500).
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
        rest.append(clean_value(m))
    if system:
        return [{"role": "system", "content": clean_text("\n\n".join(system))}, *rest]
    return rest
