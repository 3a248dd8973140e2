"""Images through the real ``python -m luna`` REPL: stored in the data folder, sent to a model
that sees (the scripted server's ``vision``), a line to one that does not."""

from __future__ import annotations

import base64
import hashlib
import json
from pathlib import Path
from typing import Any

from luna.agent.images import size_text
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


def test_repl_attach_sends_the_image_with_the_next_message_to_a_model_that_sees(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.vision = True
    llm_server.default = Reply(content="A photo.")
    (tmp_path / "photo.png").write_bytes(PHOTO)
    proc = start_repl(tmp_path, llm_server.url)
    out, err = proc.communicate("/attach photo.png\nwhat is this?\nand now?\n", timeout=120)
    assert proc.returncode == 0, err
    assert "attached photo.png (image/png, " in out and "goes with your next message" in out
    assert stored(tmp_path, PHOTO).read_bytes() == PHOTO
    first, second = chat_requests(llm_server)
    sent = first["messages"][-1]
    assert [p["type"] for p in sent["content"]] == ["image_url", "text"]
    assert sent["content"][1]["text"].startswith("what is this?")
    url = sent["content"][0]["image_url"]["url"]
    assert url == "data:image/png;base64," + base64.b64encode(normalize(PHOTO)[1]).decode()
    assert second["messages"][-1]["content"].startswith("and now?")  # attached once
    assert json.dumps(second["messages"][1]) == json.dumps(sent)  # repeated byte for byte


def test_repl_attach_to_a_model_that_cannot_see_sends_the_unseen_line(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.default = Reply(content="I cannot see it.")  # the fake reports no vision
    (tmp_path / "photo.png").write_bytes(PHOTO)
    proc = start_repl(tmp_path, llm_server.url)
    out, err = proc.communicate("/attach photo.png\nwhat is this?\n", timeout=120)
    assert proc.returncode == 0, err
    (request,) = chat_requests(llm_server)
    content = request["messages"][-1]["content"]
    assert isinstance(content, str) and content.startswith("what is this?")
    size = size_text(len(PHOTO))
    assert f"[image photo.png (image/png, {size}): not shown, this model cannot see" in content
    assert "image_url" not in json.dumps(request)


def test_repl_attach_refuses_what_is_no_image_in_one_line_and_keeps_the_message(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    llm_server.vision = True
    llm_server.default = Reply(content="Hello.")
    (tmp_path / "notes.png").write_text("these are notes, not pixels")
    (tmp_path / "cut.png").write_bytes(PHOTO[:100])
    lines = "/attach notes.png\n/attach cut.png\n/attach missing.png\n/attach\nhello\n"
    proc = start_repl(tmp_path, llm_server.url)
    out, err = proc.communicate(lines, timeout=120)
    assert proc.returncode == 0, err
    assert "not attached: notes.png refused: its bytes are not an image\n" in out
    assert "not attached: cut.png: image refused: its bytes are corrupt or not an image\n" in out
    assert "not attached: cannot read missing.png: No such file or directory\n" in out
    assert "usage: /attach PATH" in out
    (request,) = chat_requests(llm_server)
    assert request["messages"][-1]["content"].startswith("hello")
    assert "image" not in json.dumps(request["messages"][-1])
    assert not (tmp_path / "data" / "attachments").exists() or not [
        p for p in (tmp_path / "data" / "attachments").rglob("*") if p.is_file()
    ]
