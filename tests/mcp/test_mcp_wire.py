"""Luna's own MCP client (luna.mcp.rpc) against a server written by hand: what goes on the wire.

The server (servers/raw_server.py) logs every message Luna sends, so these tests read the
exact JSON Luna wrote: the handshake, answers to the server's own requests, paging, and the
``notifications/cancelled`` of a call past its timeout.
"""

from __future__ import annotations

import json
from pathlib import Path

from mcp_helpers import PY, SERVERS
from test_mcp_manager import started

RAW = str(SERVERS / "raw_server.py")


def _sent(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


async def test_wire_handshake_answers_paging_and_cancel(tmp_path, mcp_cfg, mcp_manager) -> None:
    log = tmp_path / "wire.jsonl"
    cfg = mcp_cfg({"raw": {"command": PY, "args": [RAW, str(log)], "timeout": 1}})
    manager, registry = await started(mcp_manager, cfg)
    # Both pages listed; the entry without a name is skipped, not fatal; the task-only tool
    # is not offered (every call to it would fail), and says why.
    assert sorted(n for n in registry.names() if n.startswith("raw__")) == ["raw__add", "raw__slow"]
    assert "MCP task" in manager.servers["raw"].left_out["research"]

    timed_out = await manager.call("raw__slow", {"a": 1, "b": 2})
    assert timed_out.is_error and "timed out after 1 s" in timed_out.content
    lines: list[str] = []
    added = await manager.call("raw__add", {"a": 40, "b": 2}, lines.append)
    assert (added.content, added.is_error) == ("42", False)  # the session outlived the timeout
    assert lines == ["raw__add: 50% (half)"]  # its progress, reported under its own token

    sent = _sent(log)
    init = sent[0]
    assert init["method"] == "initialize" and init["params"]["protocolVersion"] == "2025-11-25"
    assert init["params"]["clientInfo"]["name"] == "luna"
    by_id = {m.get("id"): m for m in sent if "method" not in m}
    assert by_id["p1"]["result"] == {}  # ping answered
    assert by_id[7]["error"]["code"] == -32601  # sampling is not offered
    methods = [m.get("method") for m in sent if "method" in m]
    assert methods.index("notifications/initialized") < methods.index("tools/list")
    pages = [m.get("params") for m in sent if m.get("method") == "tools/list"]
    assert pages == [None, {"cursor": "page2"}]
    calls = [m for m in sent if m.get("method") == "tools/call"]
    tokens = [c["params"]["_meta"]["progressToken"] for c in calls]
    assert len(calls) == 2 and len(set(tokens)) == 2  # every call has a token of its own
    slow = calls[0]
    cancelled = [m for m in sent if m.get("method") == "notifications/cancelled"]
    assert [c["params"]["requestId"] for c in cancelled] == [slow["id"]]


async def test_wire_unknown_protocol_version_fails_the_server(tmp_path, mcp_cfg, mcp_manager):
    log = tmp_path / "wire.jsonl"
    cfg = mcp_cfg({"raw": {"command": PY, "args": [RAW, str(log), "1999-01-01"]}})
    manager, _registry = await started(mcp_manager, cfg)
    [status] = manager.status()
    assert status.state == "failed"
    assert "speaks MCP version '1999-01-01', which Luna does not know" in (status.error or "")
