"""Config loading, validation, environment overrides, and the `config` CLI (real subprocesses)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from luna.config import SECRET_KEYS, SECTIONS, Config, build_config, load_config
from luna.errors import ConfigError
from tests.luna_process import REPO, clean_env


def run_luna(
    *args: str, cwd: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "luna", *args],
        cwd=cwd,
        env=clean_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=120,
    )


# Keys the shipped config.toml documents but leaves commented out, because setting them
# changes behaviour: an endpoint set in the file is one the user chose (never replaced by the
# demo model), the system prompt is long, and the model cache's default comes from the
# environment (machine_model_cache).
COMMENTED_OUT = {"llm.endpoint", "agent.system_prompt", "memory.model_cache"}


def test_config_toml_documents_every_key_with_its_default() -> None:
    data = tomllib.loads((REPO / "config.toml").read_text())
    text = (REPO / "config.toml").read_text()
    for section, cls in SECTIONS.items():
        for name in cls.model_fields:
            if f"{section}.{name}" in SECRET_KEYS:
                continue
            assert f"{name} =" in text, f"config.toml does not document {section}.{name}"
            if f"{section}.{name}" in COMMENTED_OUT:
                assert name not in data[section], f"{section}.{name} should stay commented out"
                continue
            assert name in data[section], f"{section}.{name} missing from config.toml"
    repo_cfg = build_config(data, {}, base_dir=REPO)
    default_cfg = build_config({}, {}, base_dir=REPO)
    for section in SECTIONS:
        assert getattr(repo_cfg, section) == getattr(default_cfg, section), section


def test_config_unknown_key_suggests_close_match(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown key llm\.endpoitn .*did you mean 'endpoint'"):
        build_config({"llm": {"endpoitn": "x"}}, {}, base_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"unknown section \[memroy\].*'memory'"):
        build_config({"memroy": {}}, {}, base_dir=tmp_path)


def test_config_wrong_type_names_key_type_and_value(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"agent\.max_rounds must be an integer, got 'many'"):
        build_config({"agent": {"max_rounds": "many"}}, {}, base_dir=tmp_path)
    with pytest.raises(ConfigError, match=r"discord\.allowed_users\[1\] must be an integer"):
        build_config({"discord": {"allowed_users": [1, "x"]}}, {}, base_dir=tmp_path)


def test_config_string_false_is_false(tmp_path: Path) -> None:
    cfg = build_config({"tools": {"sandbox": "false", "network": "true"}}, {}, base_dir=tmp_path)
    assert cfg.tools.sandbox is False and cfg.tools.network is True


def test_config_env_overrides_and_relative_paths(tmp_path: Path) -> None:
    env = {
        "LLM_ENDPOINT": "http://10.0.0.5:8001/v1",
        "LLM_MODEL": "m",
        "MEMORY_DB_PATH": "state/db.sqlite",
        "LOG_DIR": "/var/log/luna",
        "LUNA_WORKSPACE": "ws",
        "LUNA_MCP_SERVERS": "servers.json",
        "LUNA_OUTPUTS_DIR": "outs",
        "DISCORD_TOKEN": "abc.def.ghi",
        "LLM_API_KEY": "sk-secret-value",
    }
    cfg = build_config({"memory": {"db_path": "ignored.db"}}, env, base_dir=tmp_path)
    assert cfg.llm.endpoint == "http://10.0.0.5:8001/v1" and cfg.llm.model == "m"
    assert cfg.memory.db_path == tmp_path / "state/db.sqlite"
    assert cfg.observe.log_dir == Path("/var/log/luna")
    assert cfg.agent.workspace == tmp_path / "ws"
    assert cfg.mcp.servers_file == tmp_path / "servers.json"
    assert cfg.tools.outputs_dir == tmp_path / "outs"
    assert cfg.discord.token == "abc.def.ghi" and cfg.llm.api_key == "sk-secret-value"
    assert cfg.sources["memory.db_path"] == "env MEMORY_DB_PATH"
    assert cfg.data_dir == tmp_path / "state"


def test_config_refuses_secrets_in_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="DISCORD_TOKEN"):
        build_config({"discord": {"token": "x"}}, {}, base_dir=tmp_path)


def test_config_bad_env_value_never_echoes_secret(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        build_config({}, {"LLM_ENDPOINT": "ftp://nope"}, base_dir=tmp_path)
    assert "llm.endpoint" in str(info.value)


def test_config_file_relative_to_its_folder(tmp_path: Path) -> None:
    (tmp_path / "conf").mkdir()
    path = tmp_path / "conf" / "config.toml"
    path.write_text('[memory]\ndb_path = "d/x.db"\n')
    cfg = load_config(path, env={})
    assert isinstance(cfg, Config)
    assert cfg.memory.db_path == tmp_path / "conf" / "d" / "x.db"
    assert cfg.path == path.resolve()


def test_cli_bad_config_one_line_exit_2(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[agent]\nmax_rounds = 'lots'\n")
    proc = run_luna("config", "show", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0, proc.stderr
    assert "agent.max_rounds" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "config.toml").write_text("[llm]\nmodle = 'x'\n")
    proc = run_luna("config", "show", cwd=tmp_path)
    assert proc.returncode == 2 and "did you mean 'model'" in proc.stderr


def test_cli_config_show_masks_secrets_and_names_sources(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text("[agent]\nmax_rounds = 7\n")
    secret = "sk-very-secret-key-123456"
    proc = run_luna(
        "config", "show", "--json", cwd=tmp_path, env={"LLM_API_KEY": secret, "LLM_MODEL": "qq"}
    )
    assert proc.returncode == 0, proc.stderr
    assert secret not in proc.stdout
    shown = json.loads(proc.stdout)
    assert shown["agent.max_rounds"] == {"value": 7, "source": "file"}
    assert shown["llm.model"] == {"value": "qq", "source": "env LLM_MODEL"}
    assert shown["llm.temperature"]["source"] == "default"
    assert shown["llm.api_key"]["source"] == "env LLM_API_KEY"
    table = run_luna("config", "show", cwd=tmp_path, env={"LLM_API_KEY": secret})
    assert secret not in table.stdout and "agent.max_rounds" in table.stdout


def test_cli_config_set_validates_and_keeps_backup(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[agent]\nmax_rounds = 7\n")
    proc = run_luna("config", "set", "llm.temperature", "0.2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = tomllib.loads(path.read_text())
    assert data == {"agent": {"max_rounds": 7}, "llm": {"temperature": 0.2}}
    (backup,) = tmp_path.glob("config.toml.bak.*")
    assert tomllib.loads(backup.read_text()) == {"agent": {"max_rounds": 7}}
    bad = run_luna("config", "set", "agent.max_rounds", "soon", cwd=tmp_path)
    assert bad.returncode == 2 and "agent.max_rounds" in bad.stderr
    assert tomllib.loads(path.read_text())["agent"]["max_rounds"] == 7  # unchanged
    secret = run_luna("config", "set", "discord.token", "x.y.z", cwd=tmp_path)
    assert secret.returncode == 2 and "DISCORD_TOKEN" in secret.stderr
    listed = run_luna("config", "set", "discord.allowed_users", "[1, 2]", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert tomllib.loads(path.read_text())["discord"]["allowed_users"] == [1, 2]


def test_config_secret_env_values_are_secrets(tmp_path: Path) -> None:
    from luna.config import secret_values

    cfg = build_config(
        {"tools": {"secret_env": ["HOME_ASSISTANT_TOKEN", "UNSET_ONE"]}},
        {"HOME_ASSISTANT_TOKEN": "ha-123456789", "LLM_API_KEY": "sk-abc"},
        base_dir=tmp_path,
    )
    assert set(secret_values(cfg)) == {"ha-123456789", "sk-abc"}
    assert "ha-123456789" not in repr(cfg)


def test_cli_unreadable_config_and_unusable_workspace_are_one_line(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_bytes(b"[llm]\nmodel = '\xff\xfe'\n")
    proc = run_luna("config", "show", cwd=tmp_path)
    assert proc.returncode == 2 and "not UTF-8" in proc.stderr and "Traceback" not in proc.stderr
    (tmp_path / "config.toml").unlink()
    proc = run_luna("repl", cwd=tmp_path, env={"LUNA_WORKSPACE": "/proc/luna-cannot-create-this"})
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.startswith("luna: ") and proc.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"agent": {"turn_timeout": 0}}, r"agent\.turn_timeout is out of range \(allowed: 1 ≤ x"),
        ({"memory": {"embedding_dim": 0}}, r"memory\.embedding_dim is out of range .*8 ≤ x ≤ 8192"),
        ({"tools": {"bash_timeout": float("inf")}}, r"tools\.bash_timeout must be a finite number"),
        ({"llm": {"timeout": float("nan")}}, r"llm\.timeout must be a finite number"),
        ({"llm": {"temperature": -1}}, r"llm\.temperature is out of range \(allowed: 0 ≤ x ≤ 2\)"),
        ({"tools": {"bash_timeout": 500}}, r"bash_timeout \(500\) must not exceed"),
        ({"tools": {"permissions": {"bash": "maybe"}}}, r"tools\.permissions\.bash must be one of"),
        ({"memory": {"db_path": " "}}, r"memory\.db_path must not be empty"),
    ],
)
def test_config_values_that_would_break_luna_are_refused(
    tmp_path: Path, data: dict, message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        build_config(data, {}, base_dir=tmp_path)


def test_every_numeric_key_has_bounds() -> None:
    from luna.config import bounds_of

    for section, cls in SECTIONS.items():
        for name, field in cls.model_fields.items():
            if field.annotation in (int, float):
                assert bounds_of(section, name), f"{section}.{name} has no bounds"


def test_cli_config_set_keeps_comments_order_and_dated_backups(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    original = (
        "# my notes\n[agent]\n# rounds per turn\nmax_rounds = 7\n\n[llm]\n# t\ntemperature = 0.5\n"
    )
    path.write_text(original)
    first = run_luna("config", "set", "llm.temperature", "0.2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    second = run_luna("config", "set", "agent.max_rounds", "9", cwd=tmp_path)
    assert second.returncode == 0, second.stderr
    text = path.read_text()
    assert text == original.replace("0.5", "0.2").replace("= 7", "= 9")  # comments survive
    backups = sorted(tmp_path.glob("config.toml.bak.*"))
    assert len(backups) == 2 and backups[0].read_text() == original  # the original is kept
    refused = run_luna("config", "set", "agent.turn_timeout", "0", cwd=tmp_path)
    assert refused.returncode == 2 and "1 ≤ x ≤ 86400" in refused.stderr
    assert path.read_text() == text  # a refused value changes nothing
    assert len(list(tmp_path.glob("config.toml.bak.*"))) == 2


def test_cli_config_set_refuses_a_heartbeat_start_up_refuses(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text("[scheduler]\nheartbeat = true\n")
    bad = run_luna("config", "set", "scheduler.heartbeat_cron", "not a cron", cwd=tmp_path)
    assert bad.returncode == 2
    assert bad.stderr.startswith("luna: config: scheduler.heartbeat_cron: cron 'not a cron'")
    assert "heartbeat_cron" not in path.read_text()  # unchanged
    # Across keys: a cron that is harmless while the heartbeat is off blocks turning it on.
    path.write_text('[scheduler]\nheartbeat_cron = "not a cron"\n')
    on = run_luna("config", "set", "scheduler.heartbeat", "true", cwd=tmp_path)
    assert on.returncode == 2 and "scheduler.heartbeat_cron" in on.stderr
    assert "heartbeat =" not in path.read_text()
    ok = run_luna("config", "set", "scheduler.heartbeat_cron", "0 8 * * 1-5", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr


def test_cli_config_set_takes_comma_lists_and_says_sentences(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    listed = run_luna("config", "set", "tools.secret_env", "A, B", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    numbers = run_luna("config", "set", "discord.allowed_users", "1,2", cwd=tmp_path)
    assert numbers.returncode == 0, numbers.stderr
    data = tomllib.loads(path.read_text())
    assert data["tools"]["secret_env"] == ["A", "B"]
    assert data["discord"]["allowed_users"] == [1, 2]
    refusals = {
        ("llm", "x"): "luna: config: [llm] is a section; name one of its keys, like llm.",
        ("lm.endpoint", "x"): "luna: config: there is no section [lm] (did you mean 'llm'?)",
        ("llm.endpoint.x", "3"): "luna: config: there is no key llm.endpoint.x "
        "(did you mean 'llm.endpoint'?)",
        ("tools.permissions", "x"): "luna: config: tools.permissions must be a table, like ",
        ("discord.allowed_users", "x"): "luna: config: discord.allowed_users[0] must be an "
        "integer, got 'x'",
    }
    for (key, value), start in refusals.items():
        proc = run_luna("config", "set", key, value, cwd=tmp_path)
        assert proc.returncode == 2 and proc.stderr.startswith(start), proc.stderr
        assert "must be table" not in proc.stderr and "of a " not in proc.stderr


def test_config_model_cache_is_the_machine_cache_unless_set(tmp_path: Path) -> None:
    """Unset, memory.model_cache is the machine's cache (the root .ci/install uses too), moved
    by LUNA_CACHE_DIR or XDG_CACHE_HOME; without HOME either, each data folder keeps its own."""
    home = build_config({}, {"HOME": "/home/ann"}, base_dir=tmp_path).memory.model_cache
    assert home == Path("/home/ann/.cache/luna/embedding-models")
    xdg = {"HOME": "/home/ann", "XDG_CACHE_HOME": "/var/cache/luna"}
    assert build_config({}, xdg, base_dir=tmp_path).memory.model_cache == Path(
        "/var/cache/luna/luna/embedding-models"
    )
    moved = {**xdg, "LUNA_CACHE_DIR": "/srv/cache"}
    assert build_config({}, moved, base_dir=tmp_path).memory.model_cache == Path(
        "/srv/cache/luna/embedding-models"
    )
    assert build_config({}, {}, base_dir=tmp_path).memory.model_cache is None
    chosen = build_config({"memory": {"model_cache": "data/models"}}, xdg, base_dir=tmp_path)
    assert chosen.memory.model_cache == tmp_path / "data" / "models"
