"""JSON-lines event log: daily files, turn context, secret scrubbing."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import logging
from pathlib import Path

import pytest

from luna import observe


@pytest.fixture
def log_dir(tmp_path: Path):
    observe.setup(tmp_path / "logs", console=False, secrets=["sk-SECRET-123"])
    yield tmp_path / "logs"
    observe.shutdown()


def read_events(log_dir: Path) -> list[dict]:
    return [
        json.loads(line)
        for f in sorted(log_dir.glob("luna-*.jsonl"))
        for line in f.read_text().splitlines()
    ]


def test_observe_writes_daily_json_lines_with_turn_context(log_dir: Path) -> None:
    observe.log_event("start")
    with observe.turn_context("dm-42") as turn_id:
        observe.log_event("llm_call", prompt_tokens=10, latency_ms=5.0)
    today = dt.datetime.now().strftime("%Y-%m-%d")
    assert (log_dir / f"luna-{today}.jsonl").exists()
    events = read_events(log_dir)
    assert [e["event"] for e in events] == ["start", "llm_call"]
    assert "turn_id" not in events[0]
    assert events[1]["turn_id"] == turn_id and events[1]["session_id"] == "dm-42"
    assert events[1]["prompt_tokens"] == 10


def test_observe_scrubs_secrets_from_events_and_console(log_dir: Path, tmp_path: Path) -> None:
    observe.log_event("llm_call", error="401 for key sk-SECRET-123")
    assert "sk-SECRET-123" not in (log_dir.glob("*.jsonl").__next__()).read_text()
    stream_path = tmp_path / "console.txt"
    with stream_path.open("w") as stream:
        observe.setup(log_dir, console=True, secrets=["sk-SECRET-123"], stream=stream)
        logging.getLogger("luna.test").warning("key is %s", "sk-SECRET-123")
    observe.setup(log_dir, console=False)
    text = stream_path.read_text()
    assert "key is ***" in text and "sk-SECRET-123" not in text


async def test_observe_concurrent_sessions_keep_their_own_ids(log_dir: Path) -> None:
    async def turn(session: str) -> None:
        with observe.turn_context(session):
            await asyncio.sleep(0.01)
            observe.log_event("tool_run", tool="bash")

    await asyncio.gather(*(turn(f"s{i}") for i in range(5)))
    sessions = sorted(e["session_id"] for e in read_events(log_dir))
    assert sessions == [f"s{i}" for i in range(5)]


def test_observe_rolls_over_to_a_new_file_at_midnight(tmp_path: Path) -> None:
    days = iter(["2026-11-29", "2026-11-29", "2026-11-30"])
    log = observe.EventLog(tmp_path, today=lambda: next(days))
    for name in ("a", "b", "c"):
        log.write({"event": name})
    log.close()
    first = (tmp_path / "luna-2026-11-29.jsonl").read_text().splitlines()
    second = (tmp_path / "luna-2026-11-30.jsonl").read_text().splitlines()
    assert [json.loads(x)["event"] for x in first] == ["a", "b"]
    assert [json.loads(x)["event"] for x in second] == ["c"]


def test_observe_scrubs_tracebacks_and_json_escaped_secrets(tmp_path: Path) -> None:
    secret = 'p"a\\ss-123456'
    stream_path = tmp_path / "console.txt"
    with stream_path.open("w") as stream:
        observe.setup(tmp_path / "logs", console=True, secrets=[secret], stream=stream)
        try:
            raise RuntimeError(f"connect failed for https://user:{secret}@host/")
        except RuntimeError:
            logging.getLogger("luna.test").exception("request failed")
        observe.log_event("mcp_server", error=f"bad url with {secret}")
        observe.shutdown()
    assert secret not in stream_path.read_text() and "***" in stream_path.read_text()
    events = (next((tmp_path / "logs").glob("*.jsonl"))).read_text()
    assert secret not in json.loads(events.splitlines()[0])["error"]
    observe.setup(tmp_path / "logs", console=False)
