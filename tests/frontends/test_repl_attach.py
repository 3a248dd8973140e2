"""Images through the real ``python -m luna`` REPL: stored in the data folder, sent to a model
that sees (the scripted server's ``vision``), a line to one that does not."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from luna.attachments.images import normalize
from tests.fakes.images import png
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.test_repl import start_repl

PHOTO = png(1200, 900, seed=5)


def stored(tmp_path: Path, data: bytes) -> Path:
    sha = hashlib.sha256(data).hexdigest()
    return tmp_path / "data" / "attachments" / sha[:2] / sha


def chat_requests(server: FakeLLMServer) -> list[dict[str, Any]]:
    """The chat requests the server got (not the background describer's)."""
    return [r for r in server.requests if r["messages"][0]["role"] == "system"]


def test_repl_a_tools_image_is_stored_in_the_data_folder(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.vision = True
    (tmp_path / "workspace").mkdir()
    (tmp_path / "workspace" / "chart.png").write_bytes(PHOTO)
    call = {"name": "view_image", "arguments": json.dumps({"path": "chart.png"})}
    llm_server.script(Reply(tool_calls=[call]))
    llm_server.default = Reply(content="A chart.")  # the answer, and the image's description
    proc = start_repl(tmp_path, llm_server.url)
    out, err = proc.communicate("look at chart.png\n", timeout=120)
    assert proc.returncode == 0, err
    assert "A chart." in out
    assert stored(tmp_path, PHOTO).read_bytes() == PHOTO
    result = chat_requests(llm_server)[1]["messages"][-1]
    assert result["role"] == "tool"
    url = result["content"][0]["image_url"]["url"]
    assert url == "data:image/png;base64," + base64.b64encode(normalize(PHOTO)[1]).decode()
