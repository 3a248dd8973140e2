"""An image in a scheduled prompt's session: a recurring prompt whose first run got a chart
from a tool sends that chart again, the same bytes, on its next run to a model that sees, and a
line in its place to one that does not (nothing fails, the run's result is delivered)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from luna.config import Config
from luna.messages import ToolMedia, ToolResult
from luna.tools.registry import ToolRegistry
from tests.fakes.images import png
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.tools import echo_registry
from tests.scheduler.conftest import OWNER_REPL

DAY = 24 * 3600.0
CHART = png(48, 32, seed=7)
DRAW = Reply(tool_calls=[{"name": "chart", "arguments": "{}"}])


def with_chart(cfg: Config) -> ToolRegistry:
    registry = echo_registry(cfg)

    @registry.tool(level="allow")
    async def chart() -> ToolResult:
        """Draw the week's chart."""
        return ToolResult("the chart [image/png]", media=(ToolMedia("image", "image/png", CHART),))

    return registry


def image_urls(request: dict[str, Any]) -> list[str]:
    return [
        p["image_url"]["url"]
        for m in request["messages"]
        if isinstance(m.get("content"), list)
        for p in m["content"]
        if p.get("type") == "image_url"
    ]


def chat(server: FakeLLMServer) -> list[dict[str, Any]]:
    """The scheduled turns' requests (not the image describer's)."""
    return [r for r in server.requests if r["messages"][0]["role"] == "system"]


@pytest.mark.parametrize("sees", [True, False])
async def test_scheduled_prompt_sends_its_sessions_image_again_or_a_line(
    make_sched: Callable[..., Any], llm_server: FakeLLMServer, sees: bool
) -> None:
    llm_server.vision = sees
    s = await make_sched(registry=with_chart, images=True)
    s.attach()
    task = await s.add("chart the week", kind="prompt", cron="0 9 * * *")
    llm_server.script(DRAW, Reply(content="Here is the week."), Reply(content="Same as before."))
    await s.tick(3600)  # 09:00 Berlin: the first run
    await s.tick(DAY)  # the next day's run, in the same session
    first_run_after_tool, next_run = chat(llm_server)[1], chat(llm_server)[-1]
    assert len(chat(llm_server)) == 3
    assert s.texts()[-1].endswith("Same as before.")
    if sees:
        (url,) = image_urls(first_run_after_tool)
        assert url.startswith("data:image/")
        assert image_urls(next_run) == [url]  # the same bytes a day later
    else:
        assert image_urls(next_run) == []
        assert "this model cannot see images]" in json.dumps(next_run["messages"])  # a line
    after = await s.api.get(task.id, OWNER_REPL)
    assert after.last_status == "ok"
