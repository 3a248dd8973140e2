"""`luna doctor` against the scripted LLM server, a closed port, real SQLite files, real MCP
server subprocesses and the real bwrap."""

from __future__ import annotations

import base64
import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from luna.config import Config, load_config
from luna.config.secrets import discord_token_problem
from luna.doctor.checks import CheckResult, format_result, run_checks
from luna.memory.storage.store import MIGRATIONS, Store
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.luna_process import REPO

ROOT = REPO
GOOD_TOKEN = (
    base64.urlsafe_b64encode(b"112233445566778899").decode().rstrip("=") + ".GhAbCd." + "x" * 38
)


def healthy_reply(body: dict[str, Any]) -> Reply:
    """What a correctly started llama-server (--jinja --reasoning-format deepseek) returns."""
    if body.get("tools"):
        return Reply(
            reasoning="The user asks me to call ping.",
            tool_calls=[{"name": "ping", "arguments": "{}"}],
        )
    return Reply(content="OK", reasoning="Short answer.")


def write_config(tmp_path: Path, endpoint: str, model: str) -> Path:
    lines = [
        "[llm]",
        f'endpoint = "{endpoint}"',
        f'model = "{model}"',
        "context_tokens = 8192",
        "connect_timeout = 2.0",
        "[memory]",
        f'db_path = "{tmp_path / "data" / "luna.db"}"',
        "[observe]",
        f'log_dir = "{tmp_path / "data" / "logs"}"',
        "[agent]",
        f'workspace = "{tmp_path / "workspace"}"',
        "[mcp]",
        f'servers_file = "{tmp_path / "mcp_servers.json"}"',
        "start_timeout = 30.0",
        "[discord]",
        "owner_id = 42",
    ]
    path = tmp_path / "config.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def run_doctor(config: Path, *args: str, env: dict[str, str] | None = None):
    return subprocess.run(
        [sys.executable, "-m", "luna", "--config", str(config), "doctor", *args],
        cwd=ROOT,
        env={**os.environ, "PYTHONIOENCODING": "utf-8", **(env or {})},
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def lines_for(out: str, name: str) -> list[str]:
    return [line for line in out.splitlines() if f" {name}:" in line]


def test_doctor_healthy_install_exits_zero(tmp_path: Path, llm_server: FakeLLMServer) -> None:
    llm_server.default = healthy_reply
    (tmp_path / "mcp_servers.json").write_text(
        json.dumps(
            {"servers": {"time": {"command": sys.executable, "args": ["-m", "mcp_server_time"]}}}
        )
    )
    config = write_config(tmp_path, llm_server.url, llm_server.model)
    proc = run_doctor(config, env={"DISCORD_TOKEN": GOOD_TOKEN})
    out = proc.stdout
    assert proc.returncode == 0, out + proc.stderr
    for name in (
        "config", "LLM endpoint", "model alias", "context size", "history reasoning",
        "tool calls", "reasoning",
        "embeddings", "SQLite FTS5", "sqlite-vec", "schema", "bwrap sandbox", "MCP time",
        "Discord token", "data folder",
    ):  # fmt: skip
        found = [line for line in lines_for(out, name) if line[2:].startswith(name + ":")]
        assert found and found[0].startswith("✓"), f"{name}: {found}\n{out}"
    assert "8192 tokens" in out
    assert "bot id 112233445566778899" in out
    assert GOOD_TOKEN not in out + proc.stderr
    # The tool-call probe really offered one tool with tool_choice auto.
    probe = next(r for r in llm_server.requests if r.get("tools"))
    assert [t["function"]["name"] for t in probe["tools"]] == ["ping"]
    assert probe["tool_choice"] == "auto" and probe["model"] == llm_server.model
    # Doctor does not create the database.
    assert not (tmp_path / "data" / "luna.db").exists()


def test_doctor_closed_port_fails_with_url_and_fix(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    config = write_config(tmp_path, url, "qwen3.5-35b-a3b")
    proc = run_doctor(config, "--only", "config", "--only", "llm")
    out = proc.stdout.splitlines()
    assert proc.returncode == 1, proc.stdout + proc.stderr
    i = next(i for i, line in enumerate(out) if line.startswith("✗ LLM endpoint"))
    assert url in out[i] and "unreachable" in out[i]
    assert out[i + 1].strip().startswith("fix:") and "llama-server" in out[i + 1]
    assert any(line.startswith("– tool calls: skipped") for line in out)
    assert "Traceback" not in proc.stderr


def test_doctor_json_output(tmp_path: Path, llm_server: FakeLLMServer) -> None:
    llm_server.default = healthy_reply
    config = write_config(tmp_path, llm_server.url, "some-other-model")
    proc = run_doctor(config, "--only", "llm", "--json")
    data = json.loads(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 1 and data["ok"] is False
    alias = next(c for c in data["checks"] if c["name"] == "model alias")
    assert alias["ok"] is False and "fake-model" in alias["fix"]


async def _llm_checks(cfg: Config) -> dict[str, CheckResult]:
    return {r.name: r for r in await run_checks(cfg, only=["llm"])}


async def test_doctor_flags_server_without_jinja(luna_config, llm_server: FakeLLMServer) -> None:
    """Tool call written as text and <think> inline: what llama-server does without --jinja
    and --reasoning-format."""
    llm_server.default = lambda body: Reply(
        content='<think>hm</think><tool_call>{"name": "ping", "arguments": {}}</tool_call>'
    )
    checks = await _llm_checks(luna_config({"llm": {"context_tokens": 131072}}))
    assert checks["LLM endpoint"].ok and checks["model alias"].ok
    tool = checks["tool calls"]
    assert tool.failed and "written as text" in tool.detail and "--jinja" in tool.fix
    reasoning = checks["reasoning"]
    assert reasoning.ok is False and not reasoning.essential
    assert "--reasoning-format deepseek" in reasoning.fix
    ctx = checks["context size"]
    assert ctx.ok is False and not ctx.essential and "-c 131072" in ctx.fix


async def test_doctor_says_whether_the_server_sees_and_how_to_enable_it(
    luna_config, llm_server: FakeLLMServer
) -> None:
    llm_server.default = healthy_reply
    blind = (await _llm_checks(luna_config()))["vision"]
    assert blind.ok is False and not blind.essential and "--mmproj" in blind.fix
    llm_server.vision = True
    seeing = (await _llm_checks(luna_config()))["vision"]
    assert seeing.ok and "images go to the model" in seeing.detail


async def test_doctor_reports_rejected_api_key(luna_config, llm_server: FakeLLMServer) -> None:
    # /v1/models is always 200 on the fake server; a 401 on the probe is reported as such.
    llm_server.default = Reply(status=401)
    checks = await _llm_checks(luna_config())
    assert checks["tool calls"].failed and "401" in checks["tool calls"].detail


async def test_doctor_schema_checks_real_database(luna_config) -> None:
    cfg = luna_config()
    store = Store(cfg.memory.db_path)
    store.migrate()
    store.check_embedding_model(cfg.memory.embedding_model, cfg.memory.embedding_dim)
    store.close()
    (r,) = await run_checks(cfg, only=["schema"])
    assert r.ok and MIGRATIONS[-1][0] in r.detail

    other = luna_config({"memory": {"embedding_model": "nomic-embed-text", "embedding_dim": 256}})
    (r,) = await run_checks(other, only=["schema"])
    assert r.failed and "luna memory reindex" in r.fix

    store = Store(cfg.memory.db_path)
    with store.transaction() as conn:
        conn.execute(
            "INSERT INTO _migrations (name, applied_at) VALUES ('m999_from_the_future', 'x')"
        )
    store.close()
    (r,) = await run_checks(cfg, only=["schema"])
    assert r.failed and "m999_from_the_future" in r.detail


async def test_doctor_mcp_reports_each_server(luna_config, tmp_path: Path) -> None:
    cfg = luna_config({"mcp": {"start_timeout": 30.0}})
    cfg.mcp.servers_file.write_text(
        json.dumps(
            {
                "servers": {
                    "time": {"command": sys.executable, "args": ["-m", "mcp_server_time"]},
                    "broken": {"command": str(tmp_path / "no-such-binary")},
                    "off": {"command": "true", "enabled": False},
                }
            }
        )
    )
    results = {r.name: r for r in await run_checks(cfg, only=["mcp"])}
    assert results["MCP time"].ok and "tools" in results["MCP time"].detail
    broken = results["MCP broken"]
    assert broken.ok is False and not broken.essential and broken.fix
    assert results["MCP off"].ok is None


async def test_doctor_sandbox_disabled_is_a_warning(luna_config) -> None:
    (r,) = await run_checks(luna_config({"tools": {"sandbox": False}}), only=["sandbox"])
    assert r.ok is False and not r.essential and "tools.sandbox" in r.fix
    (r,) = await run_checks(luna_config(), only=["sandbox"])
    assert r.ok, r.detail  # bwrap is installed and works on the test machine


async def test_doctor_discord_token_shapes(luna_config) -> None:
    assert discord_token_problem(GOOD_TOKEN) is None
    assert discord_token_problem("abc") is not None
    assert discord_token_problem("not-a-number-at-all-xx.GhAbCd." + "x" * 38) is not None
    (r,) = await run_checks(luna_config(env={"DISCORD_TOKEN": "oops"}), only=["discord"])
    assert r.failed and "oops" not in r.detail + r.fix
    (r,) = await run_checks(luna_config(), only=["discord"])
    assert r.ok is False and not r.essential


def test_doctor_format_has_fix_line_only_for_failures() -> None:
    good = CheckResult("x", True, "fine")
    bad = CheckResult("y", False, "broken", "do this")
    assert format_result(good) == "✓ x: fine"
    assert format_result(bad) == "✗ y: broken\n    fix: do this"
    assert format_result(bad, ascii_only=True).startswith("FAIL y:")


def test_doctor_config_error_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "config.toml"
    bad.write_text("[llm]\nendpoit = 'x'\n")
    proc = run_doctor(bad)
    assert proc.returncode == 2
    assert "endpoint" in proc.stderr and "Traceback" not in proc.stderr
    with pytest.raises(Exception, match="did you mean"):
        load_config(bad)


def test_doctor_tells_whether_the_real_servers_template_keeps_reasoning(
    tmp_path: Path, real_llama
) -> None:
    from luna.config import build_config
    from luna.doctor.llm import _check_template
    from tests.real_llama import ALIAS

    for template, keeps in (("stock", False), ("luna", True)):
        server = real_llama(template)
        cfg = build_config({"llm": {"endpoint": server.url, "model": ALIAS}}, {}, base_dir=tmp_path)
        result = _check_template(server.props(), cfg)  # what /props says about the template
        assert result.ok is keeps
        if not keeps:
            assert not result.essential  # a warning: Luna works, the cache does not
            assert "qwen3.5-luna.jinja" in result.fix and "llm.history_reasoning turn" in result.fix


def test_doctor_checks_the_real_servers_slots(tmp_path: Path, real_llama) -> None:
    from luna.config import build_config
    from luna.doctor.llm import _check_slots
    from tests.real_llama import ALIAS

    for slots, fine in ((1, False), (3, True)):
        server = real_llama("stock", ctx=8192 * slots, slots=slots)
        cfg = build_config({"llm": {"endpoint": server.url, "model": ALIAS}}, {}, base_dir=tmp_path)
        result = _check_slots(server.props(), cfg)  # total_slots, from /props
        assert result.ok is fine, result
        if not fine:
            assert "-np" in result.fix and "--cache-ram" in result.fix and not result.essential
        else:
            assert "2 for sessions" in result.detail
