"""An MCP tool's image reaches a model that can see the way a user's attachment does: a REPL
turn in which the model calls server-everything's ``get-tiny-image`` (the npm reference
server, a real stdio subprocess) sends that image to the real llama-server with a vision
projector (tests/real_llama.py, ``vision=True``) as an ``image_url`` part of the tool message,
and the next turn repeats it byte for byte.

The tiny Gemma model cannot decide to call a tool, so the model's words are scripted
(tests/fakes/scripted_llama.py); every request Luna sends is rendered, tokenized, and its
images decoded and cached by the real server, which is what the server's log is read for.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from public_servers import everything_command

from luna.memory.storage.request_log import RequestLog
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.scripted_llama import Recorder, on_real_server
from tests.luna_process import data_env
from tests.real_llama import RealLlama

IMAGE_DECODED = re.compile(r"image decoded \(batch 1/1\)")
TOOL = "everything__get-tiny-image"


def _image_parts(message: dict[str, Any]) -> list[dict[str, Any]]:
    content = message.get("content")
    return [p for p in content if p.get("type") == "image_url"] if isinstance(content, list) else []


def test_mcp_tool_image_reaches_the_real_vision_server_as_an_image_part(
    tmp_path: Path, real_llama: Callable[..., RealLlama], llm_server: FakeLLMServer
) -> None:
    real = real_llama("luna", fresh_server=True, vision=True)
    llm_server.vision = True  # the scripted server answers for the real one
    recorder = Recorder()
    call = {"name": TOOL, "arguments": "{}", "id": "c1"}
    llm_server.script(
        on_real_server(real, Reply(reasoning="Get it.", tool_calls=[call]), recorder),
        on_real_server(real, Reply(content="A small logo."), recorder),
        on_real_server(real, Reply(content="Still the logo."), recorder),
    )
    servers = {"everything": {"command": everything_command(), "args": ["stdio"]}}
    (tmp_path / "mcp_servers.json").write_text(json.dumps({"servers": servers}))
    (tmp_path / "config.toml").write_text('[llm]\nhistory_reasoning = "keep"\n')
    log_start = real.log_path.stat().st_size
    proc = subprocess.run(
        [sys.executable, "-m", "luna", "repl"],
        cwd=tmp_path,
        env=data_env(tmp_path, llm_server.url, LUNA_CONFIG=str(tmp_path / "config.toml")),
        input="show me the tiny image\nwhat was it?\n",
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "A small logo." in proc.stdout and "Still the logo." in proc.stdout, proc.stdout
    requests = llm_server.requests
    assert len(requests) == 3
    result = requests[1]["messages"][-1]
    assert result["role"] == "tool"
    assert "could not be shown" not in json.dumps(result)
    (part,) = _image_parts(result)
    data = base64.b64decode(part["image_url"]["url"].split(",", 1)[1])
    assert data.startswith(b"\x89PNG")  # the tool's image, not a "[image/png, 1 KB]" line
    text = "".join(p.get("text", "") for p in result["content"] if p["type"] == "text")
    assert "Here's the image you requested" in text
    later = [p for m in requests[2]["messages"] if m["role"] == "tool" for p in _image_parts(m)]
    assert later == [part]  # turn 2 repeats it byte for byte
    log = real.log_path.read_text(errors="replace")[log_start:]
    decoded = len(IMAGE_DECODED.findall(log))
    steps = recorder.steps
    print(
        f"\nimage decoded {decoded} time(s); images per request {[s.images for s in steps]}; "
        f"cached {[s.cached_tokens for s in steps]} of {[s.prompt_tokens for s in steps]}"
    )
    assert [s.images for s in steps] == [0, 1, 1]
    assert decoded == 1, "the real server decoded the tool's image once, and kept it cached"
    session = (tmp_path / "data" / "repl_session").read_text().strip()
    logged = RequestLog(tmp_path / "data" / "requests.db").for_session(session)
    assert len(logged) == 3 and not any(r.error for r in logged)
