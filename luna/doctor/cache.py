"""``luna doctor cache SESSION``: how well each request of a session reused the server's cache.

For each request of the session (from the request log): prompt, cached and prefilled tokens.
For a request that does not extend the previous one (its messages are not the previous
request's messages plus the reply that came back), the first message and character where the
two stopped matching, and why: a summary changed by compaction, reasoning dropped, old
messages left out to fit the context, a tool result shrunk, the tool list (named: which tools
came or went) or system prompt changed. Above the table, the heads the session has kept
(``luna.agent.head``): when each was fixed and how its tools differ from the one before.

A request that extends the previous one in JSON but still re-prefilled old tokens is the
server's template re-rendering history (the stock Qwen3.5 template drops reasoning before the
last user message); that is said too.

Read-only; works with Luna running.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from dataclasses import asdict, dataclass
from typing import Any

from luna.agent.fit import LEFT_OUT_NOTE
from luna.agent.prompt import SUMMARY_HEADER, skills_listed
from luna.config import Config
from luna.memory.storage.heads import read_history
from luna.memory.storage.request_log import LoggedRequest, RequestLog

SLACK_TOKENS = 8  # a few tokens are always re-evaluated (the last token, checkpoints)


@dataclass(frozen=True)
class CacheRow:
    step: int
    turn_id: str | None
    prompt_tokens: int | None
    cached_tokens: int | None
    prefilled_tokens: int | None
    extends: bool | None  # None for the first request
    note: str


def _as_sent(reply: dict[str, Any] | None) -> dict[str, Any] | None:
    """The reply as the next request carries it back (what Luna logs and replays)."""
    if reply is None:
        return None
    out: dict[str, Any] = {"role": "assistant", "content": reply.get("content") or ""}
    if reply.get("reasoning_content"):
        out["reasoning_content"] = reply["reasoning_content"]
    if reply.get("tool_calls"):
        out["tool_calls"] = reply["tool_calls"]
    return out


def _first_difference(a: str, b: str) -> int:
    pairs = enumerate(zip(a, b, strict=False))
    return next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))


def _why(previous: dict[str, Any], current: dict[str, Any] | None, index: int) -> str:
    role = previous.get("role")
    if current is None:
        return "it ends before this message"
    if index == 0 and role == "system":
        now, before = str(current.get("content")), str(previous.get("content"))
        if LEFT_OUT_NOTE in now and LEFT_OUT_NOTE not in before:
            return "older messages were left out to fit the context"
        skills_now, skills_before = skills_listed(now), skills_listed(before)
        if skills_now != skills_before:
            return f"the skills index changed ({_names_change(skills_before, skills_now)})"
        if now.split(SUMMARY_HEADER)[-1] != before.split(SUMMARY_HEADER)[-1]:
            return "summary changed by compaction"
        return "the system prompt changed"
    if (
        role == "assistant"
        and previous.get("reasoning_content")
        and not current.get("reasoning_content")
    ):
        return "reasoning dropped (llm.history_reasoning)"
    if role != current.get("role"):
        return "a message was left out (trimmed to fit, or refused by the server)"
    if role == "tool" and len(str(current.get("content"))) < len(str(previous.get("content"))):
        return "a tool result was shrunk to fit the context"
    if role == "assistant" and previous.get("tool_calls") != current.get("tool_calls"):
        return "the tool call was replayed differently (its arguments were repaired)"
    return f"the {role} message changed"


def compare(previous: LoggedRequest, current: LoggedRequest) -> tuple[bool, str]:
    """(extends, note) for one request against the one before it."""
    if previous.body.get("tools") != current.body.get("tools"):
        change = _tools_change(previous.body.get("tools"), current.body.get("tools"))
        return False, f"the tool list changed ({change}; it is rendered before everything else)"
    expected = previous.messages + [m for m in [_as_sent(previous.reply)] if m is not None]
    sent = current.messages
    for i, want in enumerate(expected):
        got = sent[i] if i < len(sent) else None
        if got == want:
            continue
        where = f"message {i + 1} ({want.get('role')})"
        if got is None:
            return False, f"{where}: {_why(want, None, i)}"
        char = _first_difference(_text(want), _text(got))
        return False, f"{where} char {char}: {_why(want, got, i)}"
    return True, ""


def _by_name(tools: Any) -> dict[str, Any]:
    return {
        str((t.get("function") or {}).get("name")): t for t in tools or [] if isinstance(t, dict)
    }


def _tools_change(before: Any, after: Any) -> str:
    """How two tool lists differ, by name: "+added, -removed, ~changed", else "reordered"."""
    return _names_change(_by_name(before), _by_name(after))


def _names_change(old: dict[str, Any], new: dict[str, Any]) -> str:
    if old == new:
        return "the same"
    diff = [f"+{n}" for n in new if n not in old] + [f"-{n}" for n in old if n not in new]
    diff += [f"~{n}" for n in new if n in old and new[n] != old[n]]
    return ", ".join(diff) or "reordered"


def describe_heads(heads: list[tuple[int, str, dict[str, Any]]]) -> list[str]:
    """One line per head the session has had (kept with it; see luna.agent.head)."""
    lines = []
    previous: Any = None
    for cut, created, head in heads:
        tools = head.get("tools") or []
        skills = {s["name"]: s.get("description") for s in head.get("skills") or []}
        when = "fixed at the first turn" if cut == 0 else f"rebuilt at a compaction (cut {cut})"
        change = ""
        if previous is not None:
            tools_change = "the same" if previous[0] == tools else _tools_change(previous[0], tools)
            skills_change = (
                "the same" if previous[1] == skills else _names_change(previous[1], skills)
            )
            change = f" (tools: {tools_change}; skills: {skills_change})"
        count = f"{len(tools)} tool{'' if len(tools) == 1 else 's'}, {len(skills)} skills"
        lines.append(f"head {when}, {created}: {count}{change}")
        previous = (tools, skills)
    return lines


def _text(message: dict[str, Any]) -> str:
    return json.dumps(message, ensure_ascii=False, sort_keys=True)


def analyze(requests: list[LoggedRequest]) -> list[CacheRow]:
    rows: list[CacheRow] = []
    for i, req in enumerate(requests):
        if i == 0:
            rows.append(_row(i, req, None, "first request of the session"))
            continue
        prev = requests[i - 1]
        extends, note = compare(prev, req)
        if extends and req.cached_tokens is not None and prev.prompt_tokens is not None:
            if req.cached_tokens + SLACK_TOKENS < prev.prompt_tokens:
                lost = prev.prompt_tokens - req.cached_tokens
                note = (
                    f"extends the previous request, yet {lost:,} old tokens were prefilled "
                    "again: the server's template re-rendered the history (the stock Qwen3.5 "
                    "template drops reasoning before the last user message; worker-agent."
                    "service shows how to run luna's template), or the server's cache "
                    "served another session in between"
                )
        if req.error:
            note = f"failed: {req.error}" + (f"; {note}" if note else "")
        rows.append(_row(i, req, extends, note))
    return rows


def _row(i: int, req: LoggedRequest, extends: bool | None, note: str) -> CacheRow:
    counts = (req.prompt_tokens, req.cached_tokens, req.prefilled_tokens)
    return CacheRow(i + 1, req.turn_id, *counts, extends, note)


def _n(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def format_rows(rows: list[CacheRow]) -> str:
    lines = [f"{'step':>4}  {'turn':<12} {'prompt':>8} {'cached':>8} {'prefilled':>9}  note"]
    for r in rows:
        lines.append(
            f"{r.step:>4}  {(r.turn_id or '-')[:12]:<12} {_n(r.prompt_tokens):>8} "
            f"{_n(r.cached_tokens):>8} {_n(r.prefilled_tokens):>9}  {r.note}"
        )
    prompt = sum(r.prompt_tokens or 0 for r in rows)
    cached = sum(r.cached_tokens or 0 for r in rows)
    if prompt:
        lines.append(f"\n{len(rows)} requests, {cached:,} of {prompt:,} prompt tokens cached "
                     f"({cached / prompt:.0%})")  # fmt: skip
    return "\n".join(lines)


async def run_cache(args: argparse.Namespace, cfg: Config) -> int:
    log = RequestLog.beside(cfg.memory.db_path)
    try:
        requests = await asyncio.to_thread(log.for_session, args.session)
    finally:
        log.close()
    if not requests:
        print(f"no requests recorded for session {args.session!r} (see `luna replay --list`)")
        return 1
    rows = analyze(requests)
    heads = await asyncio.to_thread(read_history, cfg.memory.db_path, args.session)
    if args.json:
        print(json.dumps([asdict(r) for r in rows]))
    else:
        print("\n".join([*describe_heads(heads), format_rows(rows)]))
    return 0
