"""Model-text markup: strip leaked ``<think>`` blocks and chat tokens, recover tool calls.

Local models sometimes put their reasoning or their tool calls into the plain content instead
of the structured fields (``reasoning_content``, ``tool_calls``). This module turns such text
back into (clean content, reasoning, tool calls), both for a finished reply
(:func:`clean_reply`) and incrementally while streaming (:class:`StreamFilter`).

Invariants:
- One table of markup (``THINK_TAGS``, ``ROLE_OPENERS``, ``ROLE_WORDS``, ``CLOSERS``) drives
  both paths, so streamed text and the final reply are cleaned the same way: raw markup never
  appears in the clean content nor in text the stream filter releases.
- A tool call is recovered from text only where the model itself wrote it: never inside a
  code fence or a quoted line (the model quoting a document), and never when that exact markup
  also appears in untrusted content of the prompt (a tool result or fetched page that tried
  to plant it). Every recovered call is logged with where it came from.
- Recovered tool calls keep their arguments as JSON text; a call whose JSON cannot be repaired
  keeps the raw text as arguments so the tool layer reports the error to the model.
- Pure functions, no I/O.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from luna.messages import ToolCall, new_call_id

_log = logging.getLogger(__name__)

# ---- the one table of markup -----------------------------------------------------------
THINK_TAGS = ("think", "thinking", "reasoning")
# Chat-template tokens that open a turn; the role name after them goes too.
ROLE_OPENERS = ("<|im_start|>", "<|start_header_id|>", "<start_of_turn>")
ROLE_WORDS = ("assistant", "system", "model", "user", "tool")
CLOSERS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|endoftext|>",
    "<|end|>",
    "<|end_header_id|>",
    "<end_of_turn>",
)
# Tags that start a hidden stretch (reasoning or a tool call), with the tag that ends it.
HIDDEN = {
    **{f"<{t}>": f"</{t}>" for t in THINK_TAGS},
    "<tool_call>": "</tool_call>",
    "<function=": "</function>",
}
STRAY_CLOSERS = (*(f"</{t}>" for t in THINK_TAGS), "</tool_call>")

_ALTERNATION = "|".join(THINK_TAGS)
THINK_BLOCK = re.compile(rf"<({_ALTERNATION})>(.*?)</\1>", re.DOTALL)
THINK_OPEN = re.compile(rf"<({_ALTERNATION})>")
THINK_CLOSE = re.compile(rf"</({_ALTERNATION})>")
SPECIAL_TOKENS = re.compile(
    "(?:"
    + "|".join(map(re.escape, ROLE_OPENERS))
    + ")(?:(?:"
    + "|".join(ROLE_WORDS)
    + ")\n?)?|"
    + "|".join(map(re.escape, CLOSERS))
)
_TOOL_BLOCK = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)
_BARE_FUNCTION = re.compile(r"<function=[^>]+>.*?(?:</function>|\Z)", re.DOTALL)
_FUNCTION = re.compile(r"<function=([^>\s]+)\s*>(.*?)(?:</function>|\Z)", re.DOTALL)
_PARAMETER = re.compile(
    r"<parameter=([^>\s]+)\s*>(.*?)(?:</parameter>|(?=<parameter=)|\Z)", re.DOTALL
)
_NAME_IN_JSON = re.compile(r'"name"\s*:\s*"([^"]+)"')
# Where the model quotes rather than speaks: a fenced code block, or a line starting with ">".
_FENCED = re.compile(r"^[ \t]*(?:```|~~~)[^\n]*\n.*?(?:^[ \t]*(?:```|~~~)|\Z)", re.DOTALL | re.M)
_QUOTE_LINE = re.compile(r"^>.*$", re.M)
_KEPT = re.compile("\ue000(\\d+)\ue001")


_CONTROL = re.compile("|".join(re.escape(t) for t in (*ROLE_OPENERS, *CLOSERS)))


def defuse_chat_tokens(text: str) -> str:
    """Break chat-template control tokens in text so a tokenizer reads them as plain text."""
    if "<" not in text:
        return text
    return _CONTROL.sub(lambda m: m.group(0)[0] + "\u200b" + m.group(0)[1:], text)


def strip_think(text: str) -> tuple[str, str]:
    """Remove think blocks and chat tokens; return (content, reasoning found in the markup).

    Handles closed blocks, an unclosed opener (the rest is reasoning) and a closer with no
    opener (everything before it is reasoning, as when the template opened the block).
    """
    reasoning: list[str] = []

    def take(m: re.Match[str]) -> str:
        reasoning.append(m.group(2).strip())
        return ""

    text = THINK_BLOCK.sub(take, text)
    close = THINK_CLOSE.search(text)
    if close:
        reasoning.insert(0, text[: close.start()].strip())
        text = THINK_CLOSE.sub("", text[close.end() :])
    opener = THINK_OPEN.search(text)
    if opener:
        reasoning.append(text[opener.end() :].strip())
        text = text[: opener.start()]
    text = SPECIAL_TOKENS.sub("", text)
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


def _quoted_spans(text: str) -> list[tuple[int, int]]:
    return [m.span() for rx in (_FENCED, _QUOTE_LINE) for m in rx.finditer(text)]


def extract_tool_calls(
    text: str,
    tools: list[dict[str, Any]] | None = None,
    *,
    untrusted: Iterable[str] = (),
    where: str = "content",
) -> tuple[str, list[ToolCall]]:
    """Recover Hermes (JSON) and Qwen-XML tool calls the model wrote in its text.

    Markup inside a code fence or a quoted line, or copied from ``untrusted`` prompt text, is
    left as text and never becomes a call (see the module invariants).
    """
    if "<tool_call>" not in text and "<function=" not in text:
        return text.replace("</tool_call>", "").strip(), []
    types = _param_types(tools)
    planted = [u for u in untrusted if "<tool_call>" in u or "<function=" in u]
    calls: list[ToolCall] = []
    kept: list[str] = []  # markup left as text: swapped out so stray closers can be removed

    def take(m: re.Match[str], quoted: list[tuple[int, int]]) -> str:
        markup = m.group(0)
        if any(a <= m.start() < b for a, b in quoted) or is_planted(markup, planted):
            _log.warning("tool-call markup quoted or copied from untrusted content was not run")
            kept.append(markup)
            return f"\ue000{len(kept) - 1}\ue001"
        body = m.group(1) if m.re is _TOOL_BLOCK else markup
        call = _parse_xml_function(body, types) if "<function=" in body else None
        call = call or _parse_json_call(body)
        if call is None:
            _log.warning("dropped an unparseable tool call written as text (%d chars)", len(body))
            return ""
        _log.info("recovered tool call %s from the model's %s", call.name, where)
        calls.append(call)
        return ""

    for rx in (_TOOL_BLOCK, _BARE_FUNCTION):
        quoted = _quoted_spans(text)
        text = rx.sub(functools.partial(take, quoted=quoted), text)
    text = text.replace("</tool_call>", "")
    return _KEPT.sub(lambda m: kept[int(m.group(1))], text).strip(), calls


def is_planted(markup: str, untrusted: Iterable[str]) -> bool:
    """True when this exact tool-call markup also appears in untrusted prompt text."""
    core = markup.strip()
    return bool(core) and any(core in u for u in untrusted)


def clean_reply(
    content: str,
    reasoning: str,
    tools: list[dict[str, Any]] | None = None,
    *,
    untrusted: Iterable[str] = (),
) -> tuple[str, str, list[ToolCall], bool]:
    """(content, reasoning, recovered tool calls, used_reasoning_fallback) for a finished reply.

    When no content and no tool call remain, the cleaned reasoning becomes the content.
    """
    untrusted = list(untrusted)
    text, think = strip_think(content or "")
    text, calls = extract_tool_calls(text, tools, untrusted=untrusted)
    reasoning_clean, inner = strip_think(reasoning or "")
    reasoning_clean, more_calls = extract_tool_calls(
        reasoning_clean, tools, untrusted=untrusted, where="reasoning"
    )
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
    releases what is left at the end of the stream. Tool-call markup inside a code fence or a
    quoted line, or copied from ``untrusted`` text, is shown as text, as in the final reply.
    """

    untrusted: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)
    _buf: str = ""
    _closer: str | None = None  # set while inside a hidden block
    _hidden_is_think: bool = False
    _tool_markup: list[str] = field(default_factory=list)  # the hidden tool block so far
    _after_opener: bool = False  # a role opener was just dropped: its role word goes too
    _started: bool = False  # visible text has been released (leading whitespace dropped)
    _line: str = ""  # the visible line so far, to spot quotes and code fences
    _in_fence: bool = False
    _literal_closer: str | None = None  # a quoted tool block shown as text ends with this

    _TAGS = (*HIDDEN, *ROLE_OPENERS, *CLOSERS, *STRAY_CLOSERS)
    _TOOL_TAGS = ("<tool_call>", "<function=")

    def feed(self, piece: str) -> tuple[str, str]:
        self._buf += piece
        visible: list[str] = []
        thought: list[str] = []
        while self._buf:
            if self._closer is not None:
                if not self._consume_hidden(self._closer, visible, thought):
                    break
                continue
            if self._after_opener:
                if not self._drop_role_word(final=False):
                    break
                continue
            lt = self._buf.find("<")
            if lt < 0:
                self._show(self._buf, visible)
                self._buf = ""
                break
            self._show(self._buf[:lt], visible)
            rest = self._buf[lt:]
            tag = next((t for t in self._TAGS if rest.startswith(t)), None)
            if tag is None:
                if any(t.startswith(rest) for t in self._TAGS):
                    self._buf = rest  # might still become markup: wait for more
                    break
                self._show("<", visible)
                self._buf = rest[1:]
                continue
            self._buf = rest[len(tag) :]
            if tag == self._literal_closer:
                self._show(tag, visible)
                self._literal_closer = None
            elif tag in self._TOOL_TAGS and self._is_quoted():
                self._show(tag, visible)  # the model is quoting: text, not a call
                self._literal_closer = HIDDEN[tag]
            elif tag in HIDDEN:
                self._closer = HIDDEN[tag]
                self._hidden_is_think = tag.strip("<>") in THINK_TAGS
                self._tool_markup = [] if self._hidden_is_think else [tag]
            elif tag in ROLE_OPENERS:
                self._after_opener = True
        return self._release("".join(visible)), "".join(thought)

    def _consume_hidden(self, closer: str, visible: list[str], thought: list[str]) -> bool:
        """Consume hidden text; False when more input is needed."""
        idx = self._buf.find(closer)
        if idx < 0:
            keep = _partial_suffix(self._buf, (closer,))
            hidden, self._buf = (
                self._buf[: len(self._buf) - keep],
                self._buf[len(self._buf) - keep :],
            )
            (thought if self._hidden_is_think else self._tool_markup).append(hidden)
            return False
        inner, self._buf = self._buf[:idx], self._buf[idx + len(closer) :]
        self._closer = None
        if self._hidden_is_think:
            thought.append(inner)
            return True
        markup = "".join([*self._tool_markup, inner, closer])
        if is_planted(markup, self.untrusted):
            self._show(markup, visible)  # copied from a tool result: shown, never run
        return True

    def _drop_role_word(self, *, final: bool) -> bool:
        """After a role opener: drop ``assistant`` (and its newline); False = need more."""
        for word in ROLE_WORDS:
            if self._buf.startswith(word):
                rest = self._buf[len(word) :]
                if not rest and not final:
                    return False  # a newline may follow
                self._buf = rest[1:] if rest.startswith("\n") else rest
                self._after_opener = False
                return True
            if word.startswith(self._buf) and not final:
                return False
        self._after_opener = False
        return True

    def _show(self, text: str, visible: list[str]) -> None:
        if not text:
            return
        visible.append(text)
        for i, part in enumerate(text.split("\n")):
            if i:
                if self._line.lstrip(" \t").startswith(("```", "~~~")):
                    self._in_fence = not self._in_fence
                self._line = ""
            self._line += part

    def _is_quoted(self) -> bool:
        return (
            self._in_fence
            or self._line.startswith(">")
            or (self._line.lstrip(" \t").startswith(("```", "~~~")))
        )

    def flush(self) -> tuple[str, str]:
        if self._after_opener:
            self._drop_role_word(final=True)
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
