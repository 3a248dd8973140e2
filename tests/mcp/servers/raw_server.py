"""An MCP server written by hand, line by line, so a test decides every byte of the wire.

``raw_server.py LOG [VERSION]``: every message Luna sends is appended to LOG (JSON lines).
At ``initialize`` it first asks Luna two things of its own (a ``ping`` and a
``sampling/createMessage``, which Luna does not offer), then answers with protocol VERSION
(default 2025-11-25). ``tools/list`` comes in two pages, the second with a nameless entry;
``add`` adds, ``slow`` never answers, ``research`` can only be called as a task. A call
carries the ``progressToken`` Luna gave it; ``add`` reports progress on it first.
"""

from __future__ import annotations

import json
import sys

log_path = sys.argv[1]
version = sys.argv[2] if len(sys.argv) > 2 else "2025-11-25"
TOOL = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}


def send(message: dict) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


for line in sys.stdin:
    message = json.loads(line)
    with open(log_path, "a") as log:
        log.write(json.dumps(message) + "\n")
    method, rid = message.get("method"), message.get("id")
    if method == "initialize":
        send({"id": "p1", "method": "ping"})
        send({"id": 7, "method": "sampling/createMessage", "params": {"messages": []}})
        info = {"name": "raw", "version": "1"}
        send(
            {
                "id": rid,
                "result": {
                    "protocolVersion": version,
                    "capabilities": {"tools": {}},
                    "serverInfo": info,
                },
            }
        )
    elif method == "tools/list":
        if (message.get("params") or {}).get("cursor") == "page2":
            research = {"name": "research", "execution": {"taskSupport": "required"}}
            tools = [{"name": "add", "inputSchema": TOOL}, {"description": "no name"}, research]
            send({"id": rid, "result": {"tools": tools}})
        else:
            tools = [{"name": "slow", "description": "Never answers.", "inputSchema": TOOL}]
            send({"id": rid, "result": {"tools": tools, "nextCursor": "page2"}})
    elif method == "tools/call":
        args = message["params"]["arguments"]
        if message["params"]["name"] == "add":
            token = message["params"]["_meta"]["progressToken"]
            progress = {"progressToken": token, "progress": 1, "total": 2, "message": "half"}
            send({"method": "notifications/progress", "params": progress})
            text = str(args["a"] + args["b"])
            send({"id": rid, "result": {"content": [{"type": "text", "text": text}]}})
