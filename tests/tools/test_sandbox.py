"""bash in bubblewrap: the escape suite, timeouts, output caps, and the tool environment.

Every escape attempt runs through the real registry and real bwrap; after each one a benign
command in the same registry must still work, so "fails" never means "bash is broken".
"""

# ruff: noqa: ASYNC240 - tests check host files directly after each sandboxed run

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import tempfile
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from luna.config import Config, build_config
from luna.messages import ToolCall
from luna.tools import build_registry, sandbox_status, tool_env
from luna.tools.sandbox import bwrap_command
from tests.tools.conftest import DB_CANARY, ENV_CANARY, LOG_CANARY

BASE_ENV_CANARY = "base-envfile-canary-33ab"
MCP_CANARY = "mcp-header-canary-08fe"

TOKEN_CANARY = "secret-canary"


@pytest.fixture(autouse=True)
def _require_bwrap() -> None:
    if shutil.which("bwrap") is None:
        pytest.fail("bwrap (bubblewrap) is not installed: apt-get install bubblewrap")


@pytest.fixture
def secrets_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DISCORD_TOKEN", TOKEN_CANARY)
    monkeypatch.setenv("LLM_API_KEY", TOKEN_CANARY + "-llm")
    monkeypatch.setenv("MY_SERVICE_PASSWORD", TOKEN_CANARY + "-custom")


async def bash(reg, ctx, command: str, limit: float | None = None) -> str:
    args = {"command": command} if limit is None else {"command": command, "timeout": limit}
    result = await reg.execute(ToolCall("b", "bash", json.dumps(args)), ctx)
    return result.content


def test_sandbox_status_reports_working_bwrap(tools_config) -> None:
    ok, detail = sandbox_status(tools_config())
    assert ok, detail
    off, why = sandbox_status(tools_config({"tools": {"sandbox": False}}))
    assert not off and "tools.sandbox=false" in why


def test_build_registry_checks_the_sandbox_once_and_probes_on_request(tools_config) -> None:
    cfg = tools_config()
    quick = build_registry(cfg)
    assert quick.sandbox.ok and quick.sandbox.detail.startswith("bubblewrap at ")
    assert "namespaces work" not in quick.sandbox.detail  # no subprocess without probe
    probed = build_registry(cfg, probe=True)
    assert probed.sandbox == sandbox_status(cfg, probe=True)
    assert probed.sandbox.ok and "namespaces work" in probed.sandbox.detail
    assert probed.forced_levels == {} and probed.level_for(probed.get("bash"), "repl") == "allow"


async def test_probe_catches_a_bwrap_that_cannot_create_namespaces(
    tools_config, make_ctx, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog
) -> None:
    fake_bin = tmp_path / "fake-bin"
    fake_bin.mkdir()
    fake = fake_bin / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake_bin}:/usr/bin:/bin")
    cfg = tools_config()
    assert build_registry(cfg).sandbox.ok  # found on PATH: only a probe can tell
    with caplog.at_level("WARNING"):
        reg = build_registry(cfg, probe=True)
    assert not reg.sandbox.ok and "cannot create namespaces" in reg.sandbox.detail
    assert "No permissions to create new namespace" in reg.sandbox.detail
    assert [r.getMessage() for r in caplog.records if "not sandboxed" in r.getMessage()] == [
        f"bash is not sandboxed: {reg.sandbox.detail}"
    ]
    assert reg.level_for(reg.get("bash"), "repl") == "ask"

    async def yes(name: str, args: dict) -> bool:
        return True

    out = await bash(reg, make_ctx(approver=yes), "echo unconfined")
    assert "unconfined" in out and "[exit code: 0]" in out  # ran without the broken bwrap


def test_tool_env_is_an_allowlist(tools_config) -> None:
    cfg = tools_config(
        {
            "tools": {
                "secret_env": ["MY_TOKEN"],
                "env_passthrough": ["MY_TOKEN", "DISCORD_TOKEN", "EDITOR"],
            }
        }
    )
    environ = {
        "PATH": "/usr/bin:/bin",
        "LANG": "en_US.UTF-8",
        "DISCORD_TOKEN": "t",
        "LLM_API_KEY": "k",
        "MY_TOKEN": "m",
        "EDITOR": "vi",
        "AWS_SECRET_ACCESS_KEY": "aws",
    }
    env = tool_env(cfg, environ)
    assert env["PATH"] == "/usr/bin:/bin" and env["LANG"] == "en_US.UTF-8"
    assert env["HOME"] == str(cfg.agent.workspace)
    assert env["EDITOR"] == "vi"
    for name in ("DISCORD_TOKEN", "LLM_API_KEY", "MY_TOKEN", "AWS_SECRET_ACCESS_KEY"):
        assert name not in env


def test_bwrap_command_hides_data_dir_and_disables_network(tools_config) -> None:
    cfg = tools_config()
    cmd = bwrap_command(cfg, ["true"], cfg.agent.workspace)
    data = str(cfg.data_dir.resolve())
    ws = str(cfg.agent.workspace.resolve())
    assert cmd.index("--tmpfs", cmd.index(data) - 1) < cmd.index("--bind")
    assert ["--bind", ws, ws] == cmd[cmd.index("--bind") : cmd.index("--bind") + 3]
    assert "--unshare-net" in cmd and "--clearenv" in cmd and "--die-with-parent" in cmd
    online = bwrap_command(tools_config({"tools": {"network": True}}), ["true"], Path(ws))
    assert "--unshare-net" not in online


def escape_attempts(cfg: Config, port: int) -> list[tuple[str, str, list[str]]]:
    """(name, command, strings that must not appear in the output)."""
    outside = cfg.data_dir.parent / "outside.txt"
    payload = base64.b64encode(b"echo pwned > /etc/luna_pwned; touch /luna_pwned").decode()
    return [
        ("write outside the workspace", f"echo pwned > {outside}; echo pwned > /etc/luna_x", []),
        ("write to the data dir via ..", "echo pwned > ../pwned.txt; mkdir ../evil", []),
        ("write to the repo", f"touch {Path.cwd()}/luna_pwned", []),
        (
            "read the database",
            f"cat {cfg.memory.db_path}; cat ../luna.db; strings {cfg.memory.db_path}",
            [DB_CANARY],
        ),
        (
            "read the .env and logs",
            f"cat {cfg.data_dir}/.env; cat {cfg.observe.log_dir}/*",
            [ENV_CANARY, LOG_CANARY],
        ),
        (
            "search for the data",
            f"grep -r {DB_CANARY[:9]} {cfg.data_dir} {cfg.data_dir.parent} "
            "/tmp /run /dev/shm 2>/dev/null | head",
            [DB_CANARY],
        ),
        (
            "secrets in the environment",
            "env; cat /proc/self/environ; echo $DISCORD_TOKEN",
            [TOKEN_CANARY],
        ),
        (
            "luna's /proc environ",
            f"cat /proc/{os.getpid()}/environ; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'",
            [TOKEN_CANARY],
        ),
        (
            "reach loopback",
            f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo CONNECTED-OK; "
            f"curl -s http://127.0.0.1:{port}/ && echo CURL-OK",
            ["CONNECTED-OK", "CURL-OK"],
        ),
        ("base64 piped to sh", f"echo {payload} | base64 -d | sh", []),
        (
            "rm -rf /",
            f"timeout 3 rm -rf --no-preserve-root / 2>/dev/null; rm -fr ../* ../.env "
            f"{cfg.memory.db_path} {cfg.data_dir.parent}/* /etc/hostname 2>/dev/null; "
            "timeout 2 rm -fr /* 2>/dev/null; true",
            [],
        ),
        (
            "mount over the workspace",
            f"mount -t tmpfs none {cfg.data_dir} && echo MOUNTED",
            ["MOUNTED"],
        ),
        (
            "remount the root read-write",
            "mount -o remount,rw / && touch /etc/luna_rw && echo REMOUNTED",
            ["REMOUNTED"],
        ),
        (
            "ptrace the parent",
            f"cat /proc/{os.getppid()}/cmdline && echo SEEN-PARENT",
            ["SEEN-PARENT"],
        ),
    ]


@pytest.mark.slow  # 8 s on the shared 2-core box (2026-12-05)
async def test_escape_suite(tools_config, make_ctx, secrets_in_env, tmp_path: Path) -> None:
    cfg = tools_config({"tools": {"secret_env": ["MY_SERVICE_PASSWORD"]}})
    reg = build_registry(cfg)
    ctx = make_ctx(frontend="repl")
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(5)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    sentinel = cfg.data_dir.parent / "sentinel.txt"
    sentinel.write_text("still here")
    before_data = sorted(p.name for p in cfg.data_dir.iterdir())
    try:
        for name, command, forbidden in escape_attempts(cfg, port):
            out = await bash(reg, ctx, command, limit=60)
            for word in forbidden:
                assert word not in out, f"{name}: leaked {word!r}: {out[:500]}"
            benign = await bash(reg, ctx, "echo benign-ok > ok.txt && cat ok.txt")
            assert "benign-ok" in benign and "[exit code: 0]" in benign, f"after {name}: {benign}"
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()
    assert not (cfg.data_dir.parent / "outside.txt").exists()
    assert not Path("/etc/luna_x").exists() and not Path("/etc/luna_pwned").exists()
    assert not Path("/etc/luna_rw").exists()
    assert not Path("/luna_pwned").exists() and not (Path.cwd() / "luna_pwned").exists()
    assert sentinel.read_text() == "still here"
    assert cfg.memory.db_path.read_text().endswith(DB_CANARY)
    assert sorted(p.name for p in cfg.data_dir.iterdir()) == before_data
    assert not (cfg.data_dir / "pwned.txt").exists()


async def test_bash_workspace_is_writable_and_tmp_private(tools_config, make_ctx) -> None:
    cfg = tools_config()
    reg = build_registry(cfg)
    out = await bash(reg, make_ctx(), "echo made > made.txt; echo t > /tmp/t; ls /tmp; pwd")
    assert (cfg.agent.workspace / "made.txt").read_text() == "made\n"
    assert str(cfg.agent.workspace.resolve()) in out
    assert not Path("/tmp/t").exists() or Path("/tmp/t").read_text() != "t\n"


async def test_bash_reports_exit_code(tools_config, make_ctx) -> None:
    reg = build_registry(tools_config())
    out = await bash(reg, make_ctx(), "echo failing >&2; exit 3")
    assert "failing" in out and "[exit code: 3]" in out


def _alive_with(marker: str) -> list[int]:
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if marker.encode() in cmdline and state != "Z":
                pids.append(int(entry))
    return pids


@pytest.mark.parametrize("sandbox", [True, False])
async def test_bash_timeout_kills_whole_process_group(
    tools_config, make_ctx, sandbox: bool
) -> None:
    cfg = tools_config(
        {"tools": {"sandbox": sandbox, "bash_timeout": 1.0, "bash_max_timeout": 1.0}}
    )
    reg = build_registry(cfg)

    async def yes(name: str, args: dict) -> bool:
        return True

    marker = "4242.5" if sandbox else "4343.5"
    out = await bash(
        reg,
        make_ctx(approver=yes),
        f"sleep {marker} & (sleep {marker}; echo) ; sleep 99",
        limit=100,
    )
    assert "[timed out after 1 s" in out
    assert _alive_with(f"sleep\0{marker}") == []


async def test_bash_background_children_die_with_the_command(tools_config, make_ctx) -> None:
    reg = build_registry(tools_config())
    out = await bash(reg, make_ctx(), "sleep 4545.5 & echo started")
    assert "started" in out and "[exit code: 0]" in out
    assert _alive_with("sleep\0" + "4545.5") == []


async def test_bash_50mb_output_is_capped_without_blowing_memory(tools_config, make_ctx) -> None:
    cfg = tools_config()
    reg = build_registry(cfg)
    # tracemalloc, not ru_maxrss: a high-water mark set by an earlier test would hide growth.
    tracemalloc.start()
    try:
        out = await bash(
            reg,
            make_ctx(user_request="show me the output"),
            "yes 'line of output with words' | head -c 50000000; echo; echo THE-END",
            limit=100,
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    grown_mb = peak / 1e6
    print(f"50 MB of bash output: peak {grown_mb:.1f} MB of new allocations")
    assert "THE-END" in out  # the tail is kept
    assert "[exit code: 0]" in out
    assert len(out.encode()) < cfg.tools.passthrough_bytes + 2000
    saved = re.search(r"saved to (\S+);", out)
    assert saved, out[-500:]  # the capped output went through the pipeline
    kept = Path(saved.group(1)).read_text()
    assert "bytes of output omitted (output cap)" in kept
    assert len(kept.encode()) <= cfg.tools.output_cap_bytes + 200
    assert grown_mb < 10, f"50 MB of bash output allocated {grown_mb:.0f} MB at peak"


def test_missing_bwrap_is_reported_and_bash_asks(
    tools_config, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog
) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    cfg = tools_config()
    ok, detail = sandbox_status(cfg)
    assert not ok and "install the 'bubblewrap' package" in detail
    with caplog.at_level("WARNING"):
        reg = build_registry(cfg)
    assert any("bwrap not found" in r.getMessage() for r in caplog.records)
    assert reg.level_for(reg.get("bash"), "repl") == "ask"


async def test_network_config_lets_bash_reach_the_network(tools_config, make_ctx) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    try:
        reg = build_registry(tools_config({"tools": {"network": True}}))
        out = await bash(reg, make_ctx(), f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo REACHED")
        assert "REACHED" in out
        conn, _ = listener.accept()
        conn.close()
    finally:
        listener.close()


@pytest.fixture
def host_config() -> Iterator[Config]:
    """A default-layout install *outside* /tmp (bwrap's /tmp is private, which would hide
    tmp_path-based data folders whether or not the sandbox hides them on purpose)."""
    root = Path(tempfile.mkdtemp(prefix="luna-escape-", dir="/var/tmp"))
    try:
        cfg = build_config({}, {}, base_dir=root)
        cfg.data_dir.mkdir(parents=True)
        cfg.memory.db_path.write_text(f"SQLite format 3 {DB_CANARY}")
        (cfg.data_dir / ".env").write_text(f"DISCORD_TOKEN={ENV_CANARY}\n")
        (root / ".env").write_text(f"DISCORD_TOKEN={BASE_ENV_CANARY}\n")
        cfg.mcp.servers_file.write_text(
            json.dumps({"servers": {"s": {"headers": {"A": MCP_CANARY}}}})
        )
        cfg.observe.log_dir.mkdir(parents=True)
        (cfg.observe.log_dir / "luna-2026-01-01.jsonl").write_text(LOG_CANARY + "\n")
        cfg.agent.workspace.mkdir(parents=True)
        yield cfg
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow  # 9 s on the shared 2-core box (2026-12-05)
async def test_escape_suite_outside_tmp_hides_data_and_base_env(
    host_config: Config, make_ctx, secrets_in_env
) -> None:
    cfg = host_config
    base = cfg.base_dir
    assert not str(cfg.data_dir.resolve()).startswith("/tmp/")
    reg = build_registry(cfg)
    ctx = make_ctx(frontend="repl")
    attempts = [
        *escape_attempts(cfg, 9),
        (
            "read the .env next to config.toml",
            f"cat {base}/.env; cat ../../.env; base64 {base}/.env",
            [
                BASE_ENV_CANARY,
                base64.b64encode(f"DISCORD_TOKEN={BASE_ENV_CANARY}".encode()).decode()[:20],
            ],
        ),
        ("read mcp_servers.json", f"cat {cfg.mcp.servers_file}", [MCP_CANARY]),
        (
            "search the install",
            f"grep -ra canary {base} 2>/dev/null | head -50",
            [DB_CANARY, ENV_CANARY, BASE_ENV_CANARY, LOG_CANARY, MCP_CANARY],
        ),
    ]
    for name, command, forbidden in attempts:
        out = await bash(reg, ctx, command, limit=60)
        for word in forbidden:
            assert word not in out, f"{name}: leaked {word!r}: {out[:500]}"
        benign = await bash(reg, ctx, "echo benign-ok > ok.txt && cat ok.txt")
        assert "benign-ok" in benign and "[exit code: 0]" in benign, f"after {name}: {benign}"
    assert (base / ".env").read_text() == f"DISCORD_TOKEN={BASE_ENV_CANARY}\n"
    assert cfg.memory.db_path.read_text().endswith(DB_CANARY)
    assert not (base / "outside.txt").exists()
