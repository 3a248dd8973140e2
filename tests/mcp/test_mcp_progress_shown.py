"""A long MCP call's progress is shown where a person watches, like a long prefill's: on the
interactive REPL (a pseudo-terminal) and on the page's live event stream of the daemon
(``python -m luna web``). The call is server-everything's ``trigger-long-running-operation``
(the npm reference server over stdio), which reports progress each second; the model is
scripted. Discord's status line is tested in tests/frontends/discord/test_discord_bot.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
from public_servers import everything_command

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.test_repl_scheduler import Terminal
from tests.frontends.web.conftest import TOKEN
from tests.frontends.web.process import LunaWebProcess
from tests.scheduler.test_scheduler_process import env, wait_for

TOOL = "everything__trigger-long-running-operation"
FIRST_STEP = f"{TOOL}: 33%"


def _script(llm_server: FakeLLMServer) -> None:
    arguments = json.dumps({"duration": 3, "steps": 3})
    call = {"name": TOOL, "arguments": arguments, "id": "c1"}
    llm_server.script(Reply(tool_calls=[call]), Reply(content="The long operation is done."))


def _servers(tmp_path: Path) -> None:
    servers = {"everything": {"command": everything_command(), "args": ["stdio"], "timeout": 2}}
    (tmp_path / "mcp_servers.json").write_text(json.dumps({"servers": servers}))


def test_mcp_progress_shows_on_the_interactive_repl(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    _script(llm_server)
    environ = env(tmp_path, llm_server.url)
    _servers(tmp_path)
    term = Terminal(tmp_path, llm_server.url, environ)
    try:
        wait_for(lambda: b"you> " in term.screen, "the prompt")
        term.type(b"run the long operation\r")
        wait_for(lambda: b"The long operation is done." in term.screen, "the answer")
    finally:
        code = term.close()
    screen = term.screen.decode(errors="replace")
    assert f"[{FIRST_STEP}]" in screen, screen[-2000:]  # under the tool line, like a prefill's
    assert screen.index(f"[{FIRST_STEP}]") < screen.index("The long operation is done.")
    assert code == 0 and "Traceback" not in screen


def test_mcp_progress_reaches_the_pages_event_stream_from_the_daemon(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    _script(llm_server)
    luna = LunaWebProcess(tmp_path, llm_server.url)
    _servers(tmp_path)
    luna.start()
    events: list[dict[str, Any]] = []
    try:
        headers = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=luna.url, headers=headers, timeout=60) as client:
            with client.stream("GET", "/api/events", timeout=None) as stream:
                session = client.post("/api/sessions").json()["id"]
                sent = client.post(
                    f"/api/sessions/{session}/messages", json={"text": "run the long operation"}
                )
                assert sent.status_code == 202, sent.text
                turn = sent.json()["turn_id"]
                for line in stream.iter_lines():
                    if line.startswith("data: "):
                        event = json.loads(line[6:])
                        if event.get("turn_id") == turn:
                            events.append(event)
                            if event["type"] in ("done", "failed"):
                                break
    finally:
        assert luna.stop() == 0, "".join(luna.stderr)
    kinds = [e["type"] for e in events]
    progress = [e for e in events if e["type"] == "status" and e.get("kind") == "progress"]
    assert progress and progress[0]["text"] == FIRST_STEP, events  # chat.js shows it
    assert kinds.index("tool_started") < events.index(progress[0]) < kinds.index("tool_finished")
    assert events[-1]["type"] == "done" and events[-1]["reply"] == "The long operation is done."
