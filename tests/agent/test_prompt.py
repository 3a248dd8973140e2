"""Prompt layout: stable head, replayed history, repaired tool pairs."""

from __future__ import annotations

import datetime as dt

from luna.agent.prompt import (
    INTERRUPTED_RESULT,
    attach_context,
    build_messages,
    prefix_share,
    render_context,
    repair_tool_pairs,
)


def call(cid: str) -> dict:
    return {"id": cid, "type": "function", "function": {"name": "bash", "arguments": "{}"}}


def test_prompt_single_leading_system_message_with_summary() -> None:
    msgs = build_messages("SYS", "they like tea", [{"role": "user", "content": "hi"}])
    assert [m["role"] for m in msgs] == ["system", "user"]
    assert msgs[0]["content"].startswith("SYS") and "they like tea" in msgs[0]["content"]


def test_prompt_repair_adds_missing_result_and_drops_orphans() -> None:
    history = [
        {"role": "tool", "tool_call_id": "zz", "content": "orphan"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [call("a"), call("b")]},
        {"role": "tool", "tool_call_id": "a", "content": "A"},
        {"role": "user", "content": "next"},
    ]
    out = repair_tool_pairs(history)
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "tool", "user"]
    assert out[2]["content"] == "A"
    assert out[3] == {"role": "tool", "tool_call_id": "b", "content": INTERRUPTED_RESULT}


def test_prompt_context_has_minutes_not_seconds() -> None:
    now = dt.datetime(2026, 11, 30, 9, 41, 27, tzinfo=dt.UTC)
    block = render_context(now, "- [2026-10-01, user] likes tea")
    assert "2026-11-30 09:41 Monday" in block and ":27" not in block
    assert "likes tea" in block
    assert attach_context("hello", block).startswith("hello\n\n<context>")


def test_prompt_prefix_share_is_one_for_append_only_growth() -> None:
    first = build_messages("SYS", None, [], {"role": "user", "content": "a"})
    second = build_messages(
        "SYS",
        None,
        [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
        {"role": "user", "content": "c"},
    )
    assert prefix_share(first, second) == 1.0
    changed = build_messages("SYS2", None, [], {"role": "user", "content": "a"})
    assert prefix_share(first, changed) < 0.5
