"""delegate and code_task with the scripted LLM and a small real sub-agent loop.

The runner below is a minimal stand-in for ``Agent.run_subagent`` (written by the agent
module): a bounded chat/tool loop over the real registry and the real LLMClient.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from luna.config import Config
from luna.llm import LLMClient
from luna.messages import ToolCall
from luna.tools import ToolContext, ToolRegistry, build_registry
from tests.fakes.llm_server import Reply


def make_runner(reg: ToolRegistry, llm: LLMClient, log: list[dict[str, Any]]):
    async def run_subagent(task: str, tool_names: list[str] | None, workdir: Path | None) -> str:
        log.append({"task": task, "tools": tool_names, "workdir": workdir})
        ctx = ToolContext(
            session_id="sub",
            frontend="repl",
            user_request=task,
            approver=None,
            llm=llm,
            run_subagent=None,
            depth=1,
            workdir=workdir,
        )
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": "You are a sub-agent."},
            {"role": "user", "content": task},
        ]
        specs = reg.specs(names=tool_names or [])
        for _ in range(6):
            resp = await llm.chat(messages, specs)
            if not resp.tool_calls:
                return resp.content
            messages.append(
                {
                    "role": "assistant",
                    "content": resp.content or "",
                    "tool_calls": [c.to_wire() for c in resp.tool_calls],
                }
            )
            for call in resp.tool_calls:
                result = await reg.execute(call, ctx)
                messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": result.content}
                )
        return "(round limit)"

    return run_subagent


async def call(reg, ctx, name: str, **args) -> tuple[bool, str]:
    result = await reg.execute(ToolCall("s", name, json.dumps(args)), ctx)
    return result.is_error, result.content


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request.get("tools") or []]


async def test_delegate_runs_subagent_with_restricted_tools(
    tools_config, make_ctx, llm_server
) -> None:
    cfg: Config = tools_config()
    (cfg.agent.workspace / "notes.txt").write_text("the meeting is on Tuesday")
    reg = build_registry(cfg)
    llm = LLMClient(cfg.llm)
    log: list[dict[str, Any]] = []
    llm_server.script(
        Reply(tool_calls=[{"name": "read_file", "arguments": '{"path": "notes.txt"}'}]),
        Reply(content="The meeting is on Tuesday."),
    )
    try:
        err, out = await call(
            reg,
            make_ctx(llm=llm, run_subagent=make_runner(reg, llm, log)),
            "delegate",
            task="Read notes.txt and tell me the meeting day.",
        )
    finally:
        await llm.close()
    assert not err, out
    assert "The meeting is on Tuesday." in out and out.startswith('<untrusted source="delegate">')
    assert log[0]["workdir"] is None
    first = llm_server.requests[0]
    assert set(tool_names(first)) == {
        "read_file",
        "list_directory",
        "web_fetch",
        "web_search",
        "summarize_paper",
    }
    tool_msg = llm_server.requests[1]["messages"][-1]
    assert tool_msg["role"] == "tool" and "the meeting is on Tuesday" in tool_msg["content"]


async def test_delegate_rejects_spawning_and_unknown_tools(tools_config, make_ctx) -> None:
    reg = build_registry(tools_config())
    calls: list[str] = []

    async def runner(task: str, names: list[str] | None, workdir: Path | None) -> str:
        calls.append(task)
        return "should not run"

    ctx = make_ctx(run_subagent=runner)
    err, out = await call(reg, ctx, "delegate", task="x", tools=["delegate", "bash"])
    assert err and "cannot be given delegate" in out
    err, out = await call(reg, ctx, "delegate", task="x", tools=["read_fil"])
    assert err and "read_file" in out
    assert calls == []


async def test_subagents_cannot_spawn_subagents(tools_config, make_ctx) -> None:
    reg = build_registry(tools_config())

    async def runner(task: str, names: list[str] | None, workdir: Path | None) -> str:
        return "should not run"

    for tool in ("delegate", "code_task"):
        err, out = await call(reg, make_ctx(depth=1, run_subagent=runner), tool, task="x")
        assert err and "cannot start other sub-agents" in out, out
    err, out = await call(reg, make_ctx(run_subagent=None), "delegate", task="x")
    assert err and "not available" in out


async def test_code_task_writes_runs_and_reports_in_its_folder(
    tools_config, make_ctx, llm_server
) -> None:
    cfg: Config = tools_config()
    reg = build_registry(cfg)
    llm = LLMClient(cfg.llm)
    log: list[dict[str, Any]] = []
    program = "print(sum(range(10)))"
    llm_server.script(
        Reply(
            tool_calls=[
                {
                    "name": "write_file",
                    "arguments": json.dumps({"path": "sum.py", "content": program}),
                }
            ]
        ),
        Reply(tool_calls=[{"name": "bash", "arguments": '{"command": "python3 sum.py; pwd"}'}]),
        Reply(content="Wrote sum.py; it prints 45."),
    )
    try:
        err, out = await call(
            reg,
            make_ctx(llm=llm, run_subagent=make_runner(reg, llm, log)),
            "code_task",
            task="Write sum.py printing the sum of 0..9 and run it.",
            folder="../../escape me",
        )
    finally:
        await llm.close()
    assert not err, out
    folder = cfg.agent.workspace.resolve() / "code" / "escape-me"
    assert f"[code_task folder: {folder}]" in out and "it prints 45" in out
    assert (folder / "sum.py").read_text() == program
    assert log[0]["workdir"] == folder and set(log[0]["tools"]) == {
        "bash",
        "read_file",
        "write_file",
        "list_directory",
    }
    assert str(folder) in log[0]["task"]
    bash_result = llm_server.requests[2]["messages"][-1]["content"]
    assert "45" in bash_result and str(folder) in bash_result and "[exit code: 0]" in bash_result
    assert set(tool_names(llm_server.requests[0])) == {
        "bash",
        "read_file",
        "write_file",
        "list_directory",
    }
