"""view_image: an image file from the workspace becomes a tool image; anything else a refusal."""

from __future__ import annotations

import json

from luna.messages import ToolCall, ToolResult
from luna.tools import build_registry
from tests.fakes.images import png


async def _view(reg, ctx, path: str) -> ToolResult:
    return await reg.execute(ToolCall("v", "view_image", json.dumps({"path": path})), ctx)


async def test_view_image_returns_the_file_as_an_image(tools_config, make_ctx) -> None:
    cfg = tools_config()
    data = png(20, 10)
    (cfg.agent.workspace / "chart.png").write_bytes(data)
    result = await _view(build_registry(cfg), make_ctx(), "chart.png")
    assert not result.is_error, result.content
    assert "chart.png: image/png" in result.content
    (image,) = result.media
    assert (image.kind, image.mime, image.data) == ("image", "image/png", data)


async def test_view_image_refuses_what_is_not_an_image(tools_config, make_ctx) -> None:
    cfg = tools_config()
    ws = cfg.agent.workspace
    (ws / "fake.png").write_text("not an image at all")
    (ws / "logo.svg").write_text('<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg"/>')
    with (ws / "huge.png").open("wb") as f:
        f.write(png(4, 4))
        f.truncate(21 * 1024 * 1024)
    reg = build_registry(cfg)
    for name, why in (
        ("fake.png", "not a PNG, JPEG, GIF or WebP"),
        ("logo.svg", "SVG"),
        ("huge.png", "over 20 MB"),
        ("missing.png", "does not exist"),
        ("/etc/hostname", "outside the workspace"),
    ):
        result = await _view(reg, make_ctx(), name)
        assert result.is_error and why in result.content and not result.media, (name, result)
