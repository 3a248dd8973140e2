"""Luna's own JSON API over real HTTP: sessions, live turn events, approvals, memory, tools,
stats, doctor and settings, against the running web front-end and the scripted LLM."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from luna.config import build_config
from luna.errors import ConfigError
from luna.frontends import chosen
from luna.frontends.web import check
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.web.conftest import TOKEN
from tests.frontends.web.sse import event_stream


async def start_turn(client: Any, session: str, text: str) -> str:
    resp = await client.post(f"/api/sessions/{session}/messages", json={"text": text})
    assert resp.status_code == 202, resp.text
    return resp.json()["turn_id"]


async def test_page_turn_streams_text_and_tool_calls_then_history_shows_them(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    luna = await web_luna()
    llm_server.script(
        Reply(tool_calls=[{"name": "echo", "arguments": {"text": "ping"}}]),
        Reply(content="The echo said ping.", chunk_size=3),
    )
    async with luna.client() as client, event_stream(client) as events:
        made = await client.post("/api/sessions")
        session = made.json()["id"]
        assert made.status_code == 201 and session.startswith("web-")
        turn = await start_turn(client, session, "echo ping please")
        done = await events.wait_for(lambda e: e.get("turn_id") == turn and e["type"] == "done")
        kinds = [e["type"] for e in events.of(turn)]
        assert kinds[0] == "turn_started" and kinds[-1] == "done"
        assert kinds.index("tool_started") < kinds.index("tool_finished") < kinds.index("text")
        assert kinds.count("text") > 2  # streamed, not one block
        finished = next(e for e in events.of(turn) if e["type"] == "tool_finished")
        assert finished["name"] == "echo" and not finished["is_error"]
        assert "echo: ping" in finished["preview"]
        assert done["reply"] == "The echo said ping."
        page = (await client.get(f"/api/sessions/{session}/messages")).json()
        roles = [m["role"] for m in page["messages"]]
        assert roles == ["user", "assistant", "tool", "assistant"]
        assert page["messages"][1]["tool_calls"][0]["function"]["name"] == "echo"
        assert page["has_more"] is False
        listed = (await client.get("/api/sessions")).json()["sessions"]
        assert listed[0]["id"] == session and listed[0]["title"] == "echo ping please"
        runs = (await client.get("/api/tools/runs")).json()["runs"]
        assert runs[0]["tool"] == "echo" and runs[0]["session_id"] == session


@pytest.mark.parametrize(
    ("decision", "result"), [("approve", "risky done: x"), ("deny", "declined")]
)
async def test_approval_from_the_api_decides_the_tool(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer, decision: str, result: str
) -> None:
    luna = await web_luna()
    llm_server.script(
        Reply(tool_calls=[{"name": "risky", "arguments": {"text": "x"}}]), Reply(content="ok")
    )
    async with luna.client() as client, event_stream(client) as events:
        turn = await start_turn(client, "web-approve", "do the risky thing")
        asked = await events.wait_for(lambda e: e["type"] == "approval")
        approval = asked["approval"]
        assert approval["tool"] == "risky" and approval["session_id"] == "web-approve"
        assert approval["arguments"] == 'text: "x"'  # every argument, in full
        pending = (await client.get("/api/approvals")).json()["approvals"]
        assert [p["id"] for p in pending] == [approval["id"]]
        resp = await client.post(f"/api/approvals/{approval['id']}", json={"decision": decision})
        assert resp.status_code == 200
        again = await client.post(f"/api/approvals/{approval['id']}", json={"decision": "approve"})
        assert again.status_code == 404  # decided once
        finished = await events.wait_for(
            lambda e: e.get("turn_id") == turn and e["type"] == "tool_finished"
        )
        assert result in finished["preview"]
        await events.wait_for(lambda e: e.get("turn_id") == turn and e["type"] == "done")
    outcome = "approved" if decision == "approve" else "denied"
    assert outcome in logged_outcomes(luna)


def logged_outcomes(luna: Any) -> list[str]:
    out = []
    for path in sorted(Path(luna.cfg.observe.log_dir).glob("luna-*.jsonl")):
        for line in path.read_text().splitlines():
            ev = json.loads(line)
            if ev["event"] == "tool_approval":
                assert ev["frontend"] == "web"
                out.append(ev["outcome"])
    return out


async def test_approval_unanswered_times_out_as_deny(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    luna = await web_luna({"tools": {"approval_timeout": 1.0}})
    llm_server.script(
        Reply(tool_calls=[{"name": "risky", "arguments": {"text": "x"}}]), Reply(content="ok")
    )
    async with luna.client() as client, event_stream(client) as events:
        turn = await start_turn(client, "web-timeout", "risky")
        asked = await events.wait_for(lambda e: e["type"] == "approval")
        resolved = await events.wait_for(lambda e: e["type"] == "approval_resolved")
        assert resolved["outcome"] == "timeout"
        finished = await events.wait_for(
            lambda e: e.get("turn_id") == turn and e["type"] == "tool_finished"
        )
        assert finished["is_error"] and "risky done" not in finished["preview"]
        late = await client.post(
            f"/api/approvals/{asked['approval']['id']}", json={"decision": "approve"}
        )
        assert late.status_code == 404
    assert logged_outcomes(luna) == ["timeout"]


async def test_memory_add_search_detail_supersession_and_forget(
    web_luna: Callable[..., Any],
) -> None:
    luna = await web_luna()
    async with luna.client() as client:
        bad = await client.post("/api/memory", json={"text": "x", "importance": 11})
        assert bad.status_code == 400 and "1-10" in bad.json()["error"]
        old = (await client.post("/api/memory", json={"text": "My bike is a red Brompton"})).json()
        new = (
            await client.post(
                "/api/memory", json={"text": "My bike is a green Brompton now", "importance": 8}
            )
        ).json()
        await luna.memory.supersede(old["id"], new["id"])
        found = (await client.get("/api/memory", params={"q": "Brompton bike"})).json()["results"]
        by_id = {r["ref_id"]: r for r in found if r["kind"] == "memory"}
        assert by_id[old["id"]]["superseded_by"] == new["id"]
        assert by_id[new["id"]]["importance"] == 8 and by_id[new["id"]]["source"] == "user"
        detail = (await client.get(f"/api/memory/{old['id']}")).json()
        assert detail["scope"] == "owner" and detail["source"] == "user"
        assert [m["id"] for m in detail["superseded_chain"]] == [new["id"]]
        newer = (await client.get(f"/api/memory/{new['id']}")).json()
        assert [m["id"] for m in newer["supersedes"]] == [old["id"]]
        listed = (await client.get("/api/memory")).json()["memories"]
        assert [m["id"] for m in listed] == [new["id"], old["id"]]
        gone = await client.delete(f"/api/memory/{old['id']}")
        assert gone.status_code == 200
        assert (await client.delete(f"/api/memory/{old['id']}")).status_code == 404
        assert (await client.get(f"/api/memory/{old['id']}")).status_code == 404
        after = (await client.get("/api/memory", params={"q": "red Brompton"})).json()["results"]
        assert old["id"] not in {r["ref_id"] for r in after if r["kind"] == "memory"}


async def test_sessions_of_another_scope_are_readable_not_writable(
    web_luna: Callable[..., Any],
) -> None:
    luna = await web_luna()
    await luna.memory.append_message(
        "discord-dm-42", {"role": "user", "content": "hello bot"}, scope="user:42"
    )
    async with luna.client() as client:
        page = (await client.get("/api/sessions/discord-dm-42/messages")).json()
        assert [m["content"] for m in page["messages"]] == ["hello bot"]
        refused = await client.post(
            "/api/sessions/discord-dm-42/messages", json={"text": "owner here"}
        )
        assert refused.status_code == 403 and "user:42" in refused.json()["error"]
        bad = await client.post("/api/sessions/has%20space/messages", json={"text": "x"})
        assert bad.status_code == 400


async def test_tools_stats_and_doctor(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer
) -> None:
    luna = await web_luna()
    llm_server.script(
        Reply(tool_calls=[{"name": "echo", "arguments": {"text": "a"}}]), Reply(content="done")
    )
    async with luna.client() as client, event_stream(client) as events:
        turn = await start_turn(client, "web-stats", "go")
        await events.wait_for(lambda e: e.get("turn_id") == turn and e["type"] == "done")
        tools = {t["name"]: t for t in (await client.get("/api/tools")).json()["tools"]}
        assert tools["risky"]["level"] == "ask" and tools["echo"]["level"] == "allow"
        stats = (await client.get("/api/stats", params={"days": 7})).json()
        assert stats["summary"]["turns"] == 1 and stats["summary"]["tool_calls"] == 1
        today = stats["daily"][-1]
        assert today["turns"] == 1 and today["tool_calls"] == 1 and today["prompt_tokens"] > 0
        assert today["turn_latency_ms"]["p50"] is not None
        assert len(stats["daily"]) == 8  # every day of the window, empty ones included
        assert (await client.get("/api/stats", params={"days": 0})).status_code == 400
        doctor = (await client.get("/api/doctor", params={"only": "config"})).json()
        assert doctor["ok"] is True and doctor["checks"][0]["name"] == "config"
        assert (await client.get("/api/doctor", params={"only": "nope"})).status_code == 400


async def test_settings_show_sources_and_change_through_config_set(
    web_luna: Callable[..., Any], tmp_path: Path
) -> None:
    luna = await web_luna()
    path = tmp_path / "config.toml"
    path.write_text("# my settings\n[agent]\nmax_rounds = 7 # keep it small\n")
    async with luna.client() as client:
        shown = (await client.get("/api/config")).json()
        items = {i["key"]: i for i in shown["items"]}
        assert items["web.token"]["value"] != TOKEN and TOKEN not in json.dumps(shown)
        assert items["web.token"]["source"] == "env LUNA_WEB_TOKEN"
        assert items["llm.endpoint"]["source"] == "file"
        assert items["agent.shutdown_grace"]["source"] == "default"
        ok = await client.post("/api/config", json={"key": "agent.max_rounds", "value": "9"})
        assert ok.status_code == 200, ok.text
        assert ok.json()["value"] == 9 and "restart" in ok.json()["note"]
        text = path.read_text()
        assert "max_rounds = 9" in text and "# my settings" in text
        assert backups(tmp_path)
        after = (await client.get("/api/config")).json()
        assert after["pending"]["agent.max_rounds"] == 9  # applies at the next start
        assert {i["key"]: i["value"] for i in after["items"]}["agent.max_rounds"] != 9
        out_of_range = await client.post(
            "/api/config", json={"key": "agent.max_rounds", "value": "0"}
        )
        assert out_of_range.status_code == 400 and "allowed" in out_of_range.json()["error"]
        typo = await client.post("/api/config", json={"key": "agent.max_round", "value": "3"})
        assert "did you mean" in typo.json()["error"]
        secret = await client.post("/api/config", json={"key": "web.token", "value": "x" * 20})
        assert secret.status_code == 400 and "LUNA_WEB_TOKEN" in secret.json()["error"]
        assert "max_rounds = 9" in path.read_text()


def backups(folder: Path) -> list[Path]:
    return list(folder.glob("config.toml.bak.*"))


def test_chosen_adds_web_next_to_repl_or_discord(tmp_path: Path) -> None:
    def cfg(web: bool, discord: str = "") -> Any:
        env = {"DISCORD_TOKEN": discord} if discord else {}
        return build_config({"web": {"enabled": web}}, env, base_dir=tmp_path)

    assert chosen(cfg(False), "auto") == ["repl"]
    assert chosen(cfg(True), "auto") == ["repl", "web"]
    assert chosen(cfg(True), "repl") == ["repl", "web"]
    assert chosen(cfg(True, "x.y.z"), "auto") == ["discord", "web"]
    assert chosen(cfg(False), "web") == ["web"]


def test_check_refuses_a_missing_or_short_token_with_how_to(tmp_path: Path) -> None:
    for env in ({}, {"LUNA_WEB_TOKEN": "short"}):
        cfg = build_config({"web": {"enabled": True}}, env, base_dir=tmp_path)
        with pytest.raises(ConfigError, match="LUNA_WEB_TOKEN") as caught:
            check(cfg)
        assert "secrets.token_urlsafe" in str(caught.value) and "\n" not in str(caught.value)
    check(build_config({}, {"LUNA_WEB_TOKEN": TOKEN}, base_dir=tmp_path))
