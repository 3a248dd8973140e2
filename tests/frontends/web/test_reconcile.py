"""The OpenAI session rule: which session a request names and what its resent history means."""

from __future__ import annotations

import pytest

from luna.frontends.web.reconcile import (
    RequestError,
    content_text,
    conversation,
    reconcile,
    session_for,
)


def test_session_for_prefers_the_header_then_the_user_field() -> None:
    assert session_for("repl-20260101-abc", "alice") == "repl-20260101-abc"
    assert session_for(None, "alice") == "api:alice"
    assert session_for("  ", "") == "api:default"
    assert session_for(None, None) == "api:default"


def test_conversation_keeps_user_and_assistant_text_and_checks_the_last() -> None:
    msgs = [
        {"role": "system", "content": "be nice"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "x"}]},
        {"role": "tool", "content": "result", "tool_call_id": "x"},
        {"role": "assistant", "content": [{"type": "text", "text": "hello"}]},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]
    assert conversation(msgs) == [("user", "hi"), ("assistant", "hello"), ("user", "a\nb")]
    with pytest.raises(RequestError, match="last message"):
        conversation([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}])
    with pytest.raises(RequestError, match="non-empty"):
        conversation([])
    with pytest.raises(RequestError, match="unknown role"):
        conversation([{"role": "wizard", "content": "x"}])
    with pytest.raises(RequestError, match="empty"):
        conversation([{"role": "user", "content": "  "}])
    with pytest.raises(RequestError):
        content_text(42)


LOG = [("user", "hi"), ("assistant", "hello"), ("user", "how are you"), ("assistant", "fine")]


def test_reconcile_continued_when_the_client_history_is_the_log_tail() -> None:
    client = [*LOG, ("user", "and now?")]
    assert reconcile(client, LOG).outcome == "continued"
    # A client that only keeps the last exchange is still continuing.
    assert reconcile([*LOG[-2:], ("user", "and now?")], LOG).outcome == "continued"
    # Whitespace differences do not count.
    spaced = [("user", "hi "), ("assistant", " hello"), ("user", "x")]
    assert reconcile(spaced, LOG[:2]).outcome == "continued"


def test_reconcile_single_message_is_always_a_new_turn() -> None:
    assert reconcile([("user", "fine")], LOG).outcome == "continued"
    assert reconcile([("user", "how are you")], LOG).outcome == "continued"


def test_reconcile_replays_an_answered_resend() -> None:
    result = reconcile(LOG[:3], LOG)
    assert result.outcome == "replayed" and result.reply == "fine"
    # The same words said again after the answer are a new turn, not a resend.
    again = [*LOG, ("user", "how are you")]
    assert reconcile(again, LOG).outcome == "continued"


def test_reconcile_diverged_when_the_client_edited_history() -> None:
    edited = [("user", "hi"), ("assistant", "HELLO?"), ("user", "next")]
    result = reconcile(edited, LOG)
    assert result.outcome == "diverged" and result.text == "next"
    assert reconcile([*LOG, *LOG, ("user", "x")], LOG).outcome == "diverged"
