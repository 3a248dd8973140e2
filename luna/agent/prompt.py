"""Prompt assembly, laid out for llama-server's prefix (KV) cache.

Invariants:
- The head — one system message (system prompt, the session's skills index, then the session
  summary if any) followed by the tool declarations — is byte-identical across the turns of a
  session; it changes only when the librarian compacts the session (``luna.agent.head`` keeps
  the tools and skills index fixed until then).
- History is replayed exactly as it was sent and generated: a user message's per-turn context
  (time, recalled memories) is stored with it and re-attached verbatim, and an assistant
  message carries its reasoning back (``llm.history_reasoning``), so each request repeats what
  the server already holds and only appends.
- Per-turn context goes at the end, attached to the newest user message.
- A message's images are rendered by ``luna.agent.images`` the same way in the turn they
  arrive and in every later request (image parts for a model that can see, lines otherwise).
- This module is the one owner of tool-call/result pairing: every assistant tool call is
  followed by exactly one result with its id; calls that lost their result (a crash mid-round)
  get a placeholder, orphaned results are dropped, so the server never rejects the history.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Sequence
from typing import Any, Literal

from luna.agent.images import NO_PARTS, ImageParts, with_attachments
from luna.messages import Attachment, LoggedMessage, ToolCall

SUMMARY_HEADER = (
    "Summary of the earlier conversation in this session (older messages were compacted):"
)
SKILLS_HEADER = (
    "Skills (instructions for particular jobs, from your owner's skill folders). When a "
    "request matches one, call load_skill with its name before you start, and follow it:"
)
INTERRUPTED_RESULT = "(no result: the tool run was interrupted)"
ReasoningPolicy = Literal["keep", "turn", "drop"]


def build_system_message(
    system_prompt: str, summary: str | None, skills: Sequence[dict[str, str]] = ()
) -> dict[str, Any]:
    """The system prompt, the session's skills index (level 1: one line a skill), then the
    summary: the two parts that change only at a compaction come after the fixed one."""
    content = system_prompt.strip()
    if skills:
        lines = [f"- {s['name']}: {s['description']}" for s in skills]
        content += "\n\n" + "\n".join([SKILLS_HEADER, *lines])
    if summary:
        content += f"\n\n{SUMMARY_HEADER}\n{summary.strip()}"
    return {"role": "system", "content": content}


def skills_listed(system_content: str) -> dict[str, str]:
    """The skills a system message lists, name -> description (``build_system_message``'s
    inverse, for ``luna doctor cache``)."""
    if SKILLS_HEADER not in system_content:
        return {}
    block = system_content.split(SKILLS_HEADER, 1)[1].split(f"\n\n{SUMMARY_HEADER}", 1)[0]
    pairs = (line[2:].split(": ", 1) for line in block.splitlines() if line.startswith("- "))
    return {p[0]: p[1] if len(p) > 1 else "" for p in pairs}


def render_context(now: dt.datetime, recalled: str) -> str:
    """The per-turn context block attached to the newest user message."""
    # Minutes, not seconds: the block is persisted and replayed, so it should read naturally.
    lines = [f"Current time: {now.strftime('%Y-%m-%d %H:%M %A')} ({now.tzname() or 'local'})"]
    if recalled.strip():
        lines.append("Possibly relevant memories (from earlier conversations; may be outdated):")
        lines.append(recalled.strip())
    return "<context>\n" + "\n".join(lines) + "\n</context>"


def attach_context(text: str, context: str | None) -> str:
    return f"{text}\n\n{context}" if context else text


def assistant_message(
    content: str, calls: Sequence[ToolCall], reasoning: str = ""
) -> dict[str, Any]:
    """An assistant message as it is logged and replayed (reasoning kept when there is any)."""
    message: dict[str, Any] = {"role": "assistant", "content": content or ""}
    if calls:
        message["tool_calls"] = [c.to_wire() for c in calls]
    if reasoning:
        message["reasoning_content"] = reasoning
    return message


def tool_result(
    call_id: str, content: str, attachments: Sequence[Attachment] = ()
) -> dict[str, Any]:
    """A tool result as it is logged (its images as ``attachments``, ``Attachment.to_json``)."""
    message: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "content": content}
    if attachments:
        message["attachments"] = [a.to_json() for a in attachments]
    return message


def user_message(text: str, attachments: Sequence[Attachment] = ()) -> dict[str, Any]:
    """A user's message as it is logged (its files as ``attachments``)."""
    message: dict[str, Any] = {"role": "user", "content": text}
    if attachments:
        message["attachments"] = [a.to_json() for a in attachments]
    return message


def as_sent(message: dict[str, Any], parts: ImageParts) -> dict[str, Any]:
    """A message as it is logged -> as the model gets it (images rendered, as in history)."""
    stored = message.get("attachments")
    if stored is None:
        return message
    wire = {k: v for k, v in message.items() if k != "attachments"}
    return with_attachments(wire, [Attachment.from_json(a) for a in stored], parts)


def history_messages(
    records: Sequence[LoggedMessage],
    *,
    reasoning: ReasoningPolicy,
    parts: ImageParts = NO_PARTS,
) -> list[dict[str, Any]]:
    """Logged messages as the model sees them again: context attached, reasoning per policy,
    images as ``parts`` has them (``luna.agent.images``), every tool call paired with its
    result. ``turn`` and ``drop`` both leave reasoning out of earlier turns (what the stock
    Qwen3.5 template does to them anyway)."""
    out: list[dict[str, Any]] = []
    for r in records:
        if r.role == "system":
            continue  # the head is rebuilt every turn; a logged system message is not replayed
        message: dict[str, Any] = {"role": r.role, "content": r.content}
        if r.role == "user":
            message["content"] = attach_context(r.content, r.context)
        elif r.role == "assistant":
            if r.tool_calls:
                message["tool_calls"] = r.tool_calls
            if reasoning == "keep" and r.reasoning:
                message["reasoning_content"] = r.reasoning
        elif r.role == "tool":
            message["tool_call_id"] = r.tool_call_id or ""
            if r.name:
                message["name"] = r.name
        if r.attachments:
            message = with_attachments(message, r.attachments, parts)
        out.append(message)
    return repair_tool_pairs(out)


def repair_tool_pairs(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Make every tool call have exactly one result directly after its assistant message."""
    out: list[dict[str, Any]] = []
    i = 0
    while i < len(history):
        msg = history[i]
        if msg.get("role") == "tool":
            i += 1  # orphaned result: its call is not in view
            continue
        out.append(msg)
        i += 1
        calls = msg.get("tool_calls") or [] if msg.get("role") == "assistant" else []
        if not calls:
            continue
        results: dict[str, dict[str, Any]] = {}
        while i < len(history) and history[i].get("role") == "tool":
            results.setdefault(str(history[i].get("tool_call_id")), history[i])
            i += 1
        for call in calls:
            cid = str(call.get("id"))
            out.append(results.get(cid) or tool_result(cid, INTERRUPTED_RESULT))
    return out


def build_messages(
    system_prompt: str,
    summary: str | None,
    history: list[dict[str, Any]],
    new_user: dict[str, Any] | None = None,
    skills: Sequence[dict[str, str]] = (),
) -> list[dict[str, Any]]:
    """[system] + repaired history (+ the new user message)."""
    messages = [build_system_message(system_prompt, summary, skills)]
    messages.extend(repair_tool_pairs(history))
    if new_user is not None:
        messages.append(new_user)
    return messages


def turn_start(messages: Sequence[dict[str, Any]]) -> int:
    """Index of the newest user message: everything from there on is the current turn."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].get("role") == "user":
            return i
    return len(messages)


def prefix_share(previous: list[dict[str, Any]], current: list[dict[str, Any]]) -> float:
    """Share of the previous request's serialized prompt that the current one repeats verbatim
    from its start. A JSON-level proxy only: it cannot see what a chat template drops (such
    as reasoning before the last user message); ``bench/prefix_reuse.py`` measures tokens on
    the real server.

    Keys are sorted: the server renders messages through its chat template, so JSON key order
    never reaches the model's prompt.
    """
    a = json.dumps(previous, ensure_ascii=False, sort_keys=True)
    b = json.dumps(current, ensure_ascii=False, sort_keys=True)
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:  # binary search on slice equality: C-speed compares
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    # A trailing "]" closes the list and is always rewritten; don't count it against reuse.
    return min(1.0, lo / max(1, len(a) - 1))
