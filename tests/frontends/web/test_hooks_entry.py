"""Webhooks through the real entry point: ``python -m luna web`` with the repository's own
config.toml (its ``[hooks.door]`` example switched on) and the secret in the environment.
An acknowledged event is never lost, ``kill -9`` included: the one whose turn was cut off is
reported, never run twice; the one still waiting runs after the restart."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import httpx

from luna.hooks.signing import sign
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.web.conftest import TOKEN
from tests.frontends.web.process import LunaWebProcess
from tests.hook_example import config_with_example

SECRET = "7b3e9d1f5a0c8e2b6d4f1a9c3e7b5d0f2a8c6e4b1d9f7a3c5e0b2d8f6a4c1e9b"


def start_luna(folder: Path, endpoint: str) -> LunaWebProcess:
    proc = LunaWebProcess(folder, endpoint)  # writes a config.toml: replaced by the shipped one
    (folder / "config.toml").write_text(config_with_example().replace("port = 8765", "port = 0"))
    proc.env["LUNA_HOOK_DOOR_SECRET"] = SECRET
    return proc.start()


def send(url: str, event: dict) -> httpx.Response:
    body = json.dumps(event).encode()
    headers = {**sign(SECRET, body), "Content-Type": "application/json"}
    return httpx.post(f"{url}/hooks/door", content=body, headers=headers, timeout=30)


def rows(db: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return conn.execute(sql).fetchall()


def test_hooks_entry_point_runs_events_and_loses_none_on_kill_9(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.script(
        Reply(content="never seen: Luna is killed first", delay=120),
        Reply(content="The back door opened."),
    )
    luna = start_luna(tmp_path, llm_server.url)
    try:
        first = send(luna.url, {"entity_id": "binary_sensor.front_door", "state": "on"})
        second = send(luna.url, {"entity_id": "binary_sensor.back_door", "state": "on"})
        assert (first.status_code, second.status_code) == (202, 202), (first.text, second.text)
        (request,) = llm_server.wait_for_requests(1, timeout=60)
        assert "binary_sensor.front_door" in request["messages"][-1]["content"]
        assert luna.proc is not None
        luna.proc.kill()  # SIGKILL: the first event's turn is cut off, the second never began
        luna.proc.wait(timeout=30)
    finally:
        luna.stop()

    luna = start_luna(tmp_path, llm_server.url)
    try:
        deadline = time.monotonic() + 60
        while rows(luna.db_path, "SELECT state FROM hook_events ORDER BY id")[-1][0] != "done":
            assert time.monotonic() < deadline, "the waiting event did not run after the restart"
            time.sleep(0.1)
        states = rows(luna.db_path, "SELECT id, state FROM hook_events ORDER BY id")
        assert [s for _, s in states] == ["interrupted", "done"]
        assert "binary_sensor.back_door" in llm_server.requests[-1]["messages"][-1]["content"]
        assert len(llm_server.requests) == 2  # the cut-off event is never run again
        # Without Discord, "owner" is the terminal: both wait for the next REPL, stored.
        shown = rows(luna.db_path, "SELECT frontend, kind, text FROM deliveries ORDER BY id")
        assert [(f, k) for f, k, _ in shown] == [("repl", "notice"), ("repl", "result")]
        assert f"event #{states[0][0]}" in shown[0][2] and "cut off" in shown[0][2]
        assert shown[1][2] == "🪝 door: The back door opened."
        messages = httpx.get(
            f"{luna.url}/api/sessions/hook-door/messages",
            headers={"Authorization": f"Bearer {TOKEN}"},
            timeout=30,
        ).json()["messages"]
        assert messages[-1]["content"] == "The back door opened."
        again = send(luna.url, {"entity_id": "binary_sensor.back_door", "state": "off"})
        assert again.status_code == 202
    finally:
        assert luna.stop() == 0
