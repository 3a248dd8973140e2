"""The shapes data takes as it moves between Luna's parts.

Invariants:
- Chat history travels as OpenAI-style message dicts (``{"role": ..., "content": ...}``), the
  one format the model, the session log and the prompt builder all share.
- Tool-call arguments stay the raw JSON string the model produced until a tool validates them,
  so malformed JSON is reported to the model instead of crashing the turn.
- Agent events are what front-ends see while a turn runs; they carry no agent logic.
- Text is valid Unicode wherever it is stored or sent: ``clean_text`` is the one repair.
- Text shown on a terminal (the REPL, console log lines, every CLI command that prints stored,
  model or server text) goes through ``neutralize`` first, JSON through ``terminal_json``:
  its control characters, C1 and bidirectional controls included, are made visible, never
  obeyed.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

Frontend = Literal["repl", "discord", "telegram", "matrix", "web", "cli", "subagent"]


_SURROGATE = re.compile(r"[\ud800-\udfff]")
REPLACEMENT = "\ufffd"


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate replaced by U+FFFD: visibly, never dropped.

    Lone surrogates are what undecodable input bytes become (``surrogateescape``) and what a
    broken model reply can hold; they cannot be stored as UTF-8 nor sent as JSON. NUL and
    every other character are kept as they are.
    """
    if text.isascii():  # a flag CPython keeps on every string: no scan
        return text
    return _SURROGATE.sub(REPLACEMENT, text) if _SURROGATE.search(text) else text


_CONTROLS: dict[int, str] = {c: chr(0x2400 + c) for c in range(0x20) if c not in (0x09, 0x0A)}
_CONTROLS[0x7F] = "\u2421"  # ␡
_CONTROLS.update({c: f"\\x{c:02x}" for c in range(0x80, 0xA0)})
# Unicode's Bidi_Control characters (embeddings, overrides, isolates, marks): they reorder
# what a terminal shows ("Trojan Source"), so they are shown as ``\u202e`` and friends.
BIDI_CONTROLS = (0x061C, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A))
_CONTROLS.update({c: f"\\u{c:04x}" for c in BIDI_CONTROLS})


def neutralize(text: str) -> str:
    """``text`` safe to print on a terminal: no control a terminal would obey, none dropped.

    ESC becomes ``␛`` (U+241B) and every other C0 control but ``\\n`` and ``\\t`` its Control
    Picture (``␇``, ``␍``, ...), DEL ``␡``, a C1 control the text ``\\x9b``, a bidirectional
    control (U+202E and the rest of ``BIDI_CONTROLS``) the text ``\\u202e``, a lone surrogate
    U+FFFD. One character at a time, so a sequence split across stream deltas is caught too.
    """
    return clean_text(text).translate(_CONTROLS)


_JSON_UNSAFE = re.compile("[\x7f-\x9f\ud800-\udfff" + "".join(chr(c) for c in BIDI_CONTROLS) + "]")


def terminal_json(value: Any, *, indent: int | None = None) -> str:
    """``value`` as JSON (non-ASCII kept) safe to print on a terminal: the same JSON value,
    with DEL, every C1 control, bidirectional control and lone surrogate written as a
    ``\\u`` escape (``json.dumps`` escapes C0 controls itself, but writes those raw)."""
    text = json.dumps(value, ensure_ascii=False, indent=indent, default=str)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def clean_value(value: Any) -> Any:
    """``clean_text`` applied to every string inside a JSON-like value."""
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):
        return [clean_value(v) for v in value]
    if isinstance(value, dict):
        return {clean_text(str(k)): clean_value(v) for k, v in value.items()}
    return value


def new_call_id() -> str:
    """A fresh tool-call id, for calls the server sent without one or Luna recovered."""
    return f"call_{uuid.uuid4().hex[:16]}"


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text as the model produced it

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ToolCall:
        fn = data.get("function") or {}
        args = fn.get("arguments")
        if not isinstance(args, str):
            args = json.dumps(args if args is not None else {})
        return cls(id=str(data.get("id") or ""), name=str(fn.get("name") or ""), arguments=args)


AttachmentKind = Literal["image", "document", "audio", "other"]


@dataclass(frozen=True)
class Attachment:
    """A file that came with a message, kept in the data folder under its content hash.

    ``mime`` is sniffed from the bytes, never taken from the name or the sender's claim;
    ``name`` is for display only and never used as a path.
    """

    kind: AttachmentKind
    mime: str
    name: str
    size: int  # bytes
    sha256: str  # the stored reference (hex digest of the bytes)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "mime": self.mime,
            "name": self.name,
            "size": self.size,
            "sha256": self.sha256,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Attachment:
        kind = data.get("kind")
        return cls(
            kind=kind if kind in ("image", "document", "audio") else "other",
            mime=str(data.get("mime") or "application/octet-stream"),
            name=str(data.get("name") or ""),
            size=int(data.get("size") or 0),
            sha256=str(data.get("sha256") or ""),
        )


@dataclass(frozen=True)
class LoggedMessage:
    """One message as the session log stored it (memory returns these; ``agent.prompt`` turns
    them into what the model sees)."""

    id: int
    role: str
    content: str
    tool_calls: list[dict[str, Any]] | None = None  # wire form
    tool_call_id: str | None = None
    name: str | None = None
    context: str | None = None  # a user message's per-turn context (time, recalled memories)
    reasoning: str | None = None  # an assistant message's reasoning, as the model produced it
    attachments: tuple[Attachment, ...] = ()  # a user's files, or the images a tool returned


@dataclass(frozen=True)
class Usage:
    """Token counts of one LLM call; ``cached`` + ``prefilled`` = ``prompt`` on llama-server."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens served from the server's KV cache
    prefilled_tokens: int = 0  # prompt tokens the server had to process (timings.prompt_n)
    prompt_ms: float = 0.0  # time the server spent on them (timings.prompt_ms)


@dataclass(frozen=True)
class LLMResponse:
    content: str
    reasoning: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    usage: Usage | None = None
    finish_reason: str | None = None
    latency_s: float = 0.0
    model: str = ""

    @property
    def is_truncated(self) -> bool:
        """The reply hit max_tokens: its last tool call may be cut off mid-arguments."""
        return self.finish_reason == "length"


@dataclass(frozen=True)
class ToolMedia:
    """A picture or sound a tool returned, as its bytes, for a model that can take it.

    ``ToolResult.content`` already describes each one in a line (``[image/png, 4 KB]``), which
    is what a text-only model reads; the bytes ride beside the text, never inside it.
    """

    kind: Literal["image", "audio"]
    mime: str  # as the tool declared it
    data: bytes


@dataclass(frozen=True)
class ToolResult:
    content: str
    is_error: bool = False
    # Instructions from the owner's own disk (a skill's body): a native tool's trusted result
    # reaches the model as it is, neither shaped nor wrapped as untrusted.
    trusted: bool = False
    # Pictures and sounds the tool returned (MCP image/audio content), in result order.
    media: tuple[ToolMedia, ...] = ()


# Asks the owner whether a tool may run; returns True to allow. Timeout means deny.
Approver = Callable[[str, dict[str, Any]], Awaitable[bool]]


@dataclass(frozen=True)
class InboundMessage:
    """A message a front-end hands to the agent."""

    session_id: str
    text: str
    frontend: Frontend = "repl"
    user_id: str = "owner"
    # Memory scope: "owner" for the owner's memories, or another person's own scope:
    # "user:<id>" on Discord, "user:telegram:<id>" on Telegram.
    scope: str = "owner"
    allow_tools: bool = True
    approver: Approver | None = None
    # Where an answer given later (a scheduled task's result) goes back to, in the front-end's
    # own terms: Discord {"channel_id", "user_id", "is_dm"}; None where nothing is needed.
    address: dict[str, Any] | None = None
    attachments: tuple[Attachment, ...] = ()
    # Called once the user's message is committed, with its id (a chat app acknowledges the
    # update to its server then: luna.frontends.channels). An exception is logged, not raised.
    on_stored: Callable[[int], Awaitable[None]] | None = None
    # Set when the message was committed by a turn the process died in: the turn answers
    # that stored message instead of logging it again.
    stored_id: int | None = None


# ---- events a turn emits while it runs -------------------------------------------------


@dataclass(frozen=True)
class TextDelta:
    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    text: str


@dataclass(frozen=True)
class ToolStarted:
    call_id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class ToolFinished:
    call_id: str
    name: str
    is_error: bool
    duration_s: float
    preview: str


@dataclass(frozen=True)
class Status:
    """A line about what the turn is waiting for (the server loading, a long prefill)."""

    text: str
    kind: Literal["waiting", "progress"] = "waiting"


@dataclass(frozen=True)
class TurnDone:
    reply: str
    rounds: int
    usage: Usage | None = None
    finish_reason: str | None = None  # the server's, for the final reply ("length": cut off)


@dataclass(frozen=True)
class TurnFailed:
    """The turn could not finish; ``message`` is one short line for the user."""

    message: str


AgentEvent = (
    TextDelta | ReasoningDelta | Status | ToolStarted | ToolFinished | TurnDone | TurnFailed
)
