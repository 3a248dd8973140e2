"""The request log keeps each request's body exactly, and a lone surrogate as U+FFFD."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from luna.memory.storage.request_log import RequestLog


def test_request_log_keeps_bodies_exactly_and_repairs_lone_surrogates(tmp_path: Path) -> None:
    log = RequestLog(tmp_path / "requests.db")
    body = {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Zeit für Tulpen 🌷"},
            {"role": "user", "content": "where \ud83d go the bulbs?"},
        ],
        "tools": [{"type": "function", "function": {"name": "echo", "parameters": {}}}],
    }
    reply = {"content": "in the shed \udcff", "finish_reason": "stop"}
    try:
        log.record("s", "t", body, reply)
        log.record("s", "t", body, None)
        first, second = log.for_session("s")
    finally:
        log.close()
    sent = first.body["messages"]
    assert sent[0] == body["messages"][0]  # valid non-ASCII text: kept as it was
    assert sent[1]["content"] == "where \ufffd go the bulbs?"
    assert first.body["tools"] == body["tools"] and first.body["model"] == "m"
    assert first.reply == {"content": "in the shed \ufffd", "finish_reason": "stop"}
    assert second.body == first.body and second.reply is None
    # Each part is stored once, as canonical JSON (sorted keys, no spaces, text unescaped).
    with sqlite3.connect(tmp_path / "requests.db") as conn:
        parts = [row[0] for row in conn.execute("SELECT body FROM parts")]
    assert '{"content":"Zeit für Tulpen 🌷","role":"system"}' in parts
    assert len(parts) == len(set(parts)) == 5  # params, tools, 2 messages, 1 reply
