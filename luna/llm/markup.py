"""Model-text markup: strip leaked ``<think>`` blocks, recover tool calls written as text.

Local models sometimes put their reasoning or their tool calls into the plain content instead
of the structured fields (``reasoning_content``, ``tool_calls``). This module turns such text
back into (clean content, reasoning, tool calls), both for a finished reply
(:func:`clean_reply`) and incrementally while streaming (:class:`StreamFilter`).

Invariants:
- Raw markup (``<think>``, ``<tool_call>``, ``<function=...>``, chat-template special tokens)
  never appears in the clean content nor in text the stream filter releases.
- Recovered tool calls keep their arguments as JSON text; a call whose JSON cannot be repaired
  keeps the raw text as arguments so the tool layer reports the error to the model.
- Pure functions, no I/O.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from luna.messages import ToolCall

_log = logging.getLogger(__name__)

THINK_TAGS = ("think", "thinking", "reasoning")
_THINK_BLOCK = re.compile(r"<(think|thinking|reasoning)>(.*?)</\1>", re.DOTALL)
_THINK_OPEN = re.compile(r"<(think|thinking|reasoning)>", re.DOTALL)
_THINK_CLOSE = re.compile(r"</(think|thinking|reasoning)>")
_SPECIAL_TOKENS = re.compile(
    r"<\|(?:im_start|im_end|eot_id|endoftext|end|start_header_id|end_header_id)\|>"
    r"|<end_of_turn>|<start_of_turn>(?:model|user)?"
)
_TOOL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_BARE_FUNCTION = re.compile(r"<function=[^>]+>.*?(?:</function>|\Z)", re.DOTALL)
_FUNCTION = re.compile(r"<function=([^>\s]+)\s*>(.*?)(?:</function>|\Z)", re.DOTALL)
_PARAMETER = re.compile(
    r"<parameter=([^>\s]+)\s*>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL
)
_NAME_IN_JSON = re.compile(r'"name"\s*:\s*"([^"]+)"')

# Tags that switch the stream filter into a hidden mode, with the tag that ends that mode.
_HIDDEN_OPENERS = {
    "<think>": "</think>",
    "<thinking>": "</thinking>",
    "<reasoning>": "</reasoning>",
    "<tool_call>": "</tool_call>",
    "<function=": "</function>",
}
_DROPPED_TOKENS = (
    "</think>",
    "</thinking>",
    "</reasoning>",
    "</tool_call>",
    "<|im_start|>",
    "<|im_end|>",
    "<|eot_id|>",
    "<|endoftext|>",
    "<|end|>",
    "<end_of_turn>",
    "<start_of_turn>",
)
_ALL_TAGS = tuple(_HIDDEN_OPENERS) + _DROPPED_TOKENS


def new_call_id() -> str:
    return f"call_{uuid.uuid4().hex[:16]}"


def strip_think(text: str) -> tuple[str, str]:
    """Remove think blocks; return (content, reasoning found in the markup).

    Handles closed blocks, an unclosed opener (the rest is reasoning) and a closer with no
    opener (everything before it is reasoning, as when the template opened the block).
    """
    reasoning: list[str] = []

    def take(m: re.Match[str]) -> str:
        reasoning.append(m.group(2).strip())
        return ""

    text = _THINK_BLOCK.sub(take, text)
    close = _THINK_CLOSE.search(text)
    if close:
        reasoning.insert(0, text[: close.start()].strip())
        text = text[close.end() :]
        text = _THINK_CLOSE.sub("", text)
    opener = _THINK_OPEN.search(text)
    if opener:
        reasoning.append(text[opener.end() :].strip())
        text = text[: opener.start()]
    text = _SPECIAL_TOKENS.sub("", text)
    return text.strip(), "\n\n".join(r for r in reasoning if r)


def _param_types(tools: list[dict[str, Any]] | None) -> dict[str, dict[str, str]]:
    types: dict[str, dict[str, str]] = {}
    for tool in tools or []:
        fn = tool.get("function") or {}
        props = (fn.get("parameters") or {}).get("properties") or {}
        types[fn.get("name", "")] = {
            p: str(spec.get("type", "")) for p, spec in props.items() if isinstance(spec, dict)
        }
    return types


def _parse_xml_function(body: str, types: dict[str, dict[str, str]]) -> ToolCall | None:
    m = _FUNCTION.search(body)
    if not m:
        return None
    name, inner = m.group(1).strip(), m.group(2)
    schema = types.get(name, {})
    args: dict[str, Any] = {}
    for pm in _PARAMETER.finditer(inner):
        pname = pm.group(1).strip()
        raw = pm.group(2)
        raw = raw[1:] if raw.startswith("\n") else raw
        raw = raw[:-1] if raw.endswith("\n") else raw
        if schema.get(pname) == "string":
            args[pname] = raw
            continue
        try:
            args[pname] = json.loads(raw)
        except json.JSONDecodeError:
            args[pname] = raw
    return ToolCall(id=new_call_id(), name=name, arguments=json.dumps(args, ensure_ascii=False))


def _parse_json_call(body: str) -> ToolCall | None:
    body = body.strip()
    try:
        obj = json.loads(body)
    except json.JSONDecodeError:
        m = _NAME_IN_JSON.search(body)
        if not m:
            return None
        # Keep the broken text so the tool layer tells the model what was wrong.
        return ToolCall(id=new_call_id(), name=m.group(1), arguments=body)
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if not isinstance(args, str):
        args = json.dumps(args if args is not None else {}, ensure_ascii=False)
    return ToolCall(id=new_call_id(), name=obj["name"], arguments=args)


def extract_tool_calls(
    text: str, tools: list[dict[str, Any]] | None = None
) -> tuple[str, list[ToolCall]]:
    """Recover Hermes (JSON) and Qwen-XML tool calls written in the content."""
    if "<tool_call>" not in text and "<function=" not in text:
        return text, []
    types = _param_types(tools)
    calls: list[ToolCall] = []

    def take(m: re.Match[str]) -> str:
        body = m.group(1) if m.re is _TOOL_BLOCK else m.group(0)
        call = _parse_xml_function(body, types) if "<function=" in body else None
        call = call or _parse_json_call(body)
        if call is None:
            _log.warning("dropped an unparseable tool call written as text (%d chars)", len(body))
        else:
            calls.append(call)
        return ""

    text = _TOOL_BLOCK.sub(take, text)
    text = _BARE_FUNCTION.sub(take, text)
    return text.replace("</tool_call>", "").strip(), calls


def clean_reply(
    content: str, reasoning: str, tools: list[dict[str, Any]] | None = None
) -> tuple[str, str, list[ToolCall], bool]:
    """(content, reasoning, recovered tool calls, used_reasoning_fallback) for a finished reply.

    When no content and no tool call remain, the cleaned reasoning becomes the content.
    """
    text, think = strip_think(content or "")
    text, calls = extract_tool_calls(text, tools)
    reasoning_clean, inner = strip_think(reasoning or "")
    reasoning_clean, more_calls = extract_tool_calls(reasoning_clean, tools)
    full_reasoning = "\n\n".join(r for r in (reasoning_clean, inner, think) if r)
    fallback = False
    if not text and not calls and not more_calls and full_reasoning:
        text, fallback = full_reasoning, True
    # A call only written inside the reasoning is still a call the model meant to make.
    return text, full_reasoning, calls + (more_calls if not calls else []), fallback


@dataclass
class StreamFilter:
    """Incremental version of :func:`clean_reply` for on_text: holds back possible markup.

    ``feed`` returns (visible text, hidden reasoning text) released by this piece; ``flush``
    releases what is left at the end of the stream.
    """

    _buf: str = ""
    _closer: str | None = None  # set while inside a hidden block
    _hidden_is_think: bool = False
    _started: bool = False  # visible text has been released (leading whitespace dropped)
    released: list[str] = field(default_factory=list)

    def feed(self, piece: str) -> tuple[str, str]:
        self._buf += piece
        visible: list[str] = []
        thought: list[str] = []
        while self._buf:
            if self._closer is not None:
                idx = self._buf.find(self._closer)
                if idx < 0:
                    keep = _partial_suffix(self._buf, (self._closer,))
                    hidden, self._buf = (
                        self._buf[: len(self._buf) - keep],
                        self._buf[len(self._buf) - keep :],
                    )
                    if self._hidden_is_think:
                        thought.append(hidden)
                    break
                if self._hidden_is_think:
                    thought.append(self._buf[:idx])
                self._buf = self._buf[idx + len(self._closer) :]
                self._closer = None
                continue
            lt = self._buf.find("<")
            if lt < 0:
                visible.append(self._buf)
                self._buf = ""
                break
            visible.append(self._buf[:lt])
            rest = self._buf[lt:]
            tag = next((t for t in _ALL_TAGS if rest.startswith(t)), None)
            if tag is None:
                if any(t.startswith(rest) for t in _ALL_TAGS):
                    self._buf = rest  # might still become markup: wait for more
                    break
                visible.append("<")
                self._buf = rest[1:]
                continue
            self._buf = rest[len(tag) :]
            if tag in _HIDDEN_OPENERS:
                self._closer = _HIDDEN_OPENERS[tag]
                self._hidden_is_think = tag.strip("<>") in THINK_TAGS
        return self._release("".join(visible)), "".join(thought)

    def flush(self) -> tuple[str, str]:
        buf, self._buf = self._buf, ""
        if self._closer is not None:
            return "", buf if self._hidden_is_think else ""
        return self._release(buf), ""

    def _release(self, text: str) -> str:
        if not self._started:
            text = text.lstrip()
            self._started = bool(text)
        if text:
            self.released.append(text)
        return text


def _partial_suffix(buf: str, tags: tuple[str, ...]) -> int:
    """Length of the longest suffix of buf that is a proper prefix of one of tags."""
    best = 0
    for tag in tags:
        for n in range(min(len(tag) - 1, len(buf)), 0, -1):
            if buf.endswith(tag[:n]):
                best = max(best, n)
                break
    return best
