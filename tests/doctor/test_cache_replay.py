"""``luna doctor cache``, ``luna replay`` and the cache figures of ``luna stats``, run for real.

A session runs through the real Agent against the scripted server (with the request log
Luna's app wires in); then the commands run as ``python -m luna`` subprocesses on its data.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from luna import observe
from luna.agent import Agent
from luna.agent.prompt import skills_listed
from luna.config import Config, build_config
from luna.llm import LLMClient
from luna.memory import Memory
from luna.memory.storage.request_log import RequestLog
from luna.messages import InboundMessage
from luna.skills import store
from luna.skills.library import SkillLibrary
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.fakes.tools import echo_registry
from tests.luna_process import data_env


def config(tmp_path: Path, url: str, policy: str) -> Config:
    data = {
        "llm": {"endpoint": url, "model": "fake-model", "history_reasoning": policy},
        "memory": {"db_path": str(tmp_path / "data" / "luna.db"), "librarian": False},
        "observe": {"log_dir": str(tmp_path / "data" / "logs"), "console": False},
        "agent": {"workspace": str(tmp_path / "workspace")},
        "mcp": {"servers_file": str(tmp_path / "mcp_servers.json")},
    }
    return build_config(data, {}, base_dir=tmp_path)


async def run_session(cfg: Config, llm_server: FakeLLMServer, session: str) -> None:
    observe.setup(cfg.observe.log_dir, console=False)
    memory = Memory(cfg.memory)
    await memory.open(background=False)
    llm = LLMClient(cfg.llm)
    requests = RequestLog.beside(cfg.memory.db_path)
    agent = Agent(cfg, llm, memory, echo_registry(cfg), requests=requests)
    call = {"name": "echo", "arguments": '{"text": "hi"}', "id": "c1"}
    llm_server.script(
        Reply(reasoning="Echo first.", tool_calls=[call]),
        Reply(reasoning="Now answer.", content="It said hi."),
        Reply(content="Bye."),
    )
    try:
        for text in ("echo hi", "thanks"):
            [e async for e in agent.run_turn(InboundMessage(session_id=session, text=text))]
    finally:
        requests.close()
        await llm.close()
        await memory.close()
        observe.shutdown()


def luna(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "luna", *args],
        env=data_env(tmp_path, url),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


async def test_doctor_cache_names_where_and_why_a_request_did_not_extend(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    await run_session(config(tmp_path, llm_server.url, "drop"), llm_server, "s1")
    out = luna(tmp_path, llm_server.url, "doctor", "cache", "s1", "--json")
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert rows[0]["extends"] is None and all(r["prompt_tokens"] for r in rows)
    # With reasoning not sent back, the tool round no longer extends what was generated.
    assert rows[1]["extends"] is False
    assert "message 3 (assistant)" in rows[1]["note"] and "reasoning dropped" in rows[1]["note"]
    table = luna(tmp_path, llm_server.url, "doctor", "cache", "s1")
    assert "reasoning dropped" in table.stdout and "prompt tokens cached" in table.stdout
    missing = luna(tmp_path, llm_server.url, "doctor", "cache", "nope")
    assert missing.returncode == 1 and "no requests recorded" in missing.stdout


async def test_doctor_cache_shows_every_request_extending_when_reasoning_is_kept(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    await run_session(config(tmp_path, llm_server.url, "keep"), llm_server, "s1")
    rows = json.loads(luna(tmp_path, llm_server.url, "doctor", "cache", "s1", "--json").stdout)
    assert [r["extends"] for r in rows] == [None, True, True]


async def test_replay_rebuilds_the_exact_request_and_sends_it_again(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    await run_session(config(tmp_path, llm_server.url, "keep"), llm_server, "s1")
    sent: list[dict[str, Any]] = llm_server.requests
    listed = luna(tmp_path, llm_server.url, "replay", "--list", "--json")
    assert json.loads(listed.stdout)[0] == {**json.loads(listed.stdout)[0], "requests": 3}
    out = luna(tmp_path, llm_server.url, "replay", "s1", "--step", "2", "--json")
    assert out.returncode == 0, out.stderr
    rebuilt = json.loads(out.stdout)
    assert rebuilt["request"] == sent[1]  # byte for byte what went on the wire
    turn = luna(tmp_path, llm_server.url, "replay", "s1", "--turn", "1", "--json")
    assert [json.loads(line)["step"] for line in turn.stdout.splitlines()] == [1, 2]
    llm_server.script(Reply(content="a different answer"))
    again = luna(tmp_path, llm_server.url, "replay", "s1", "--step", "2", "--send")
    assert again.returncode == 0, again.stderr
    assert "-- recorded answer:\n[reasoning] Now answer.\nIt said hi." in again.stdout
    assert "a different answer" in again.stdout
    assert llm_server.requests[-1]["messages"] == sent[1]["messages"]
    assert luna(tmp_path, llm_server.url, "replay", "s1", "--step", "9").returncode == 1


async def test_stats_show_the_cache_hit_ratio_and_prefill_per_day(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    await run_session(config(tmp_path, llm_server.url, "keep"), llm_server, "s1")
    out = luna(tmp_path, llm_server.url, "stats", "--json")
    data = json.loads(out.stdout)
    assert data["cached_tokens"] > 0 and 0 < data["cache_hit_ratio"] < 1
    assert sum(d["prefilled_tokens"] for d in data["per_day"]) == data["prefilled_tokens"]
    table = luna(tmp_path, llm_server.url, "stats")
    assert "hit ratio" in table.stdout and "prefill time" in table.stdout


async def test_doctor_cache_names_the_head_rebuilt_at_a_compaction(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    cfg = config(tmp_path, llm_server.url, "keep")
    memory = Memory(cfg.memory)
    await memory.open(background=False)
    llm = LLMClient(cfg.llm)
    requests = RequestLog.beside(cfg.memory.db_path)
    registry = echo_registry(cfg)
    agent = Agent(cfg, llm, memory, registry, requests=requests)

    async def turn(text: str) -> None:
        [e async for e in agent.run_turn(InboundMessage(session_id="s1", text=text))]

    try:
        await turn("one")

        @registry.tool(level="allow")
        async def later() -> str:
            """A tool that arrived after the session started."""
            return "late"

        await turn("two")  # same head: the new tool is not declared
        cut = (await memory.session_messages("s1"))[-1].id
        await memory.set_summary("s1", "They counted to two.", cut)  # a compaction
        await turn("three")
    finally:
        requests.close()
        await llm.close()
        await memory.close()
    rows = json.loads(luna(tmp_path, llm_server.url, "doctor", "cache", "s1", "--json").stdout)
    assert [r["extends"] for r in rows] == [None, True, False]
    assert rows[2]["note"].startswith("the tool list changed (+later;")
    table = luna(tmp_path, llm_server.url, "doctor", "cache", "s1").stdout
    assert "head fixed at the first turn" in table and "1 tool, 0 skills\n" in table
    assert f"head rebuilt at a compaction (cut {cut})" in table
    assert "2 tools, 0 skills (tools: +later; skills: the same)" in table


async def test_doctor_cache_names_a_skill_change_at_the_compaction(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    cfg = config(tmp_path, llm_server.url, "keep")
    memory = Memory(cfg.memory)
    await memory.open(background=False)
    llm = LLMClient(cfg.llm)
    requests = RequestLog.beside(cfg.memory.db_path)
    registry = echo_registry(cfg)
    registry.skills = SkillLibrary(cfg)
    agent = Agent(cfg, llm, memory, registry, requests=requests)

    async def turn(text: str) -> None:
        [e async for e in agent.run_turn(InboundMessage(session_id="s1", text=text))]

    source = tmp_path / "src" / "tax-return"
    source.mkdir(parents=True)
    (source / "SKILL.md").write_text(
        "---\nname: tax-return\ndescription: Files the tax return. Use in April.\n---\nSteps.\n"
    )
    try:
        await turn("one")
        store.add(cfg, source)  # installed while the session runs
        await turn("two")  # the head is kept: the new skill waits for the compaction
        cut = (await memory.session_messages("s1"))[-1].id
        await memory.set_summary("s1", "They counted to two.", cut)
        await turn("three")
    finally:
        requests.close()
        await llm.close()
        await memory.close()
    sent = llm_server.requests
    assert "tax-return" not in skills_listed(sent[1]["messages"][0]["content"])
    assert "tax-return" in skills_listed(sent[2]["messages"][0]["content"])
    rows = json.loads(luna(tmp_path, llm_server.url, "doctor", "cache", "s1", "--json").stdout)
    assert [r["extends"] for r in rows] == [None, True, False]
    assert "the skills index changed (+tax-return)" in rows[2]["note"]
    table = luna(tmp_path, llm_server.url, "doctor", "cache", "s1").stdout
    assert "(tools: the same; skills: +tax-return)" in table
