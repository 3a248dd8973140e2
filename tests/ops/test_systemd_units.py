"""systemd units: systemd accepts them, and they keep the promises the README makes.

- ``systemd-analyze verify`` passes (with binary paths and the user rewritten to ones that
  exist here), and a typo in a directive makes it fail;
- ``systemd-analyze security --offline`` (systemd's own reading of the unit) finds the
  protections the README names - a non-root user, no new privileges, a read-only system, no
  home folders, a private /tmp - and none of the restrictions that would break bubblewrap;
- what Luna does under the unit fits it: every path it writes with the shipped config.toml is
  writable, the llama-server it talks to is the one the worker starts on loopback, SIGTERM
  leaves room for the shutdown grace plus the MCP stop bound, a config error (exit 2) is not
  restarted, and the API key never reaches argv.

Needs the ``systemd`` Debian package (it provides systemd-analyze); CI installs it.
"""

from __future__ import annotations

import ipaddress
import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

from luna.config import AgentConfig, Config, load_config
from luna.mcp.session import STOP_TIMEOUT
from tests.luna_process import REPO, clean_env

AGENT = REPO / "luna-agent.service"
WORKER = REPO / "worker-agent.service"


def _directives(path: Path) -> dict[str, list[str]]:
    """key -> values in file order, backslash continuations joined, comments skipped."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def _value(d: dict[str, list[str]], key: str, default: str | None = None) -> str:
    """The effective value of a single-valued directive (the last assignment wins)."""
    if key not in d:
        assert default is not None, f"missing {key}="
        return default
    return d[key][-1]


def _list(d: dict[str, list[str]], key: str) -> list[str]:
    """The effective value of a list directive (an empty assignment resets it)."""
    items: list[str] = []
    for value in d.get(key, []):
        items = [] if not value else [*items, *value.split()]
    return items


def _environment(d: dict[str, list[str]]) -> dict[str, str]:
    return dict(a.split("=", 1) for v in d.get("Environment", []) for a in shlex.split(v))


def _security(unit: Path, threshold: int) -> tuple[dict[str, dict], int]:
    """systemd's offline security assessment: {setting: row} and the exit code at ``threshold``
    (0-100, systemd's exposure level times ten)."""
    exe = _systemd_analyze()
    args = [exe, "security", "--offline=true", f"--threshold={threshold}", "--json=short"]
    proc = subprocess.run(
        [*args, str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    rows = {row["json_field"]: row for row in json.loads(proc.stdout)}
    return rows, proc.returncode


def _systemd_analyze() -> str:
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.fail(
            "systemd-analyze is missing: install the Debian package `systemd` "
            "(apt-get install -y systemd) — CI's .ci/run must install it"
        )
    return exe


def _luna_under_the_unit(tmp_path: Path) -> tuple[Config, Path]:
    """The config Luna loads under luna-agent.service, with /opt/luna moved to ``tmp_path``."""
    d = _directives(AGENT)
    home = Path(_value(d, "WorkingDirectory"))
    env = _environment(d)
    config = Path(env["LUNA_CONFIG"])
    assert config.is_relative_to(home), "config.toml lives in the checkout"
    local = tmp_path / config.relative_to(home)
    local.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(REPO / config.relative_to(home), local)
    env = {k: v for k, v in env.items() if k != "LUNA_CONFIG"}
    return load_config(local, env=env), home


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    units = [_rewritten(AGENT, tmp_path), _rewritten(WORKER, tmp_path)]
    result = _verify(units)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    # verify only warns (exit 0) about unknown keys or unparsable values: treat those as
    # failures too.
    problems = [
        line
        for line in output.splitlines()
        if any(u.name in line for u in units) or "ignoring" in line.lower()
    ]
    assert problems == [], "\n".join(problems)


def test_verify_catches_a_broken_unit(tmp_path: Path) -> None:
    """The check above has teeth: a typo in a directive shows up."""
    unit = _rewritten(AGENT, tmp_path)
    unit.write_text(unit.read_text().replace("ProtectSystem=", "ProtectSytem="))
    result = _verify([unit])
    assert "Unknown key" in result.stdout + result.stderr


@pytest.mark.parametrize("unit", [AGENT, WORKER], ids=lambda p: p.name)
def test_units_are_hardened_as_systemd_sees_it(unit: Path) -> None:
    rows, code = _security(unit, threshold=50)
    assert code == 0, "systemd rates the unit's exposure above 5.0"
    for setting in ("UserOrDynamicUser", "NoNewPrivileges", "ProtectHome", "PrivateTmp"):
        assert rows[setting]["set"], f"{setting}: {rows[setting]['description']}"
    assert rows["ProtectSystem"]["set"] and "strict" in rows["ProtectSystem"]["description"]
    assert rows["CapabilityBoundingSet_CAP_SYS_ADMIN"]["set"]  # no administrator capability


def test_agent_unit_leaves_bubblewrap_its_namespaces() -> None:
    """bwrap needs user/mount/pid/net namespaces and mount(2) inside them."""
    rows, _ = _security(AGENT, threshold=100)
    for setting in (
        "RestrictNamespaces_user",
        "RestrictNamespaces_mnt",
        "RestrictNamespaces_pid",
        "RestrictNamespaces_net",
        "SystemCallFilter_mount",
        "PrivateUsers",
    ):
        assert not rows[setting]["set"], f"{setting} would break the bash sandbox"


def test_agent_unit_runs_luna_from_its_venv_with_secrets_from_the_environment_file(
    tmp_path: Path,
) -> None:
    d = _directives(AGENT)
    home = Path(_value(d, "WorkingDirectory"))
    argv = shlex.split(_value(d, "ExecStart"))
    assert Path(argv[0]).is_relative_to(home / ".venv") and argv[1:] == ["-m", "luna"]
    assert _value(d, "User") not in ("", "root", "0")
    assert _value(d, "EnvironmentFile").lstrip("-") == "/etc/luna/luna.env"
    assert not {"DISCORD_TOKEN", "LLM_API_KEY"} & set(_environment(d))  # never in the unit
    cfg, home = _luna_under_the_unit(tmp_path)
    writable = [Path(p) for p in _list(d, "ReadWritePaths")]
    assert writable == [home / "data"]  # the README: only the data folder is writable
    local_writable = tmp_path / writable[0].relative_to(home)
    for name, path in {
        "memory.db_path": cfg.memory.db_path,
        "observe.log_dir": cfg.observe.log_dir,
        "agent.workspace": cfg.agent.workspace,
        "tools.outputs_dir": cfg.tools.outputs_dir,
    }.items():
        assert path.is_relative_to(local_writable), f"{name} ({path}) is read-only under systemd"


def test_agent_unit_gives_shutdown_time_and_does_not_restart_a_config_error(
    tmp_path: Path,
) -> None:
    d = _directives(AGENT)
    assert _value(d, "KillSignal", "SIGTERM") == "SIGTERM"  # Luna's graceful stop
    # Turns get shutdown_grace, then MCP servers get their stop bound, before SIGKILL.
    assert float(_value(d, "TimeoutStopSec")) > AgentConfig().shutdown_grace + STOP_TIMEOUT
    assert _value(d, "Restart") == "on-failure"
    (tmp_path / "config.toml").write_text("[agent]\nmax_rounds = 'lots'\n")
    proc = subprocess.run(
        [sys.executable, "-m", "luna", "config", "show"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode != 0, proc.stdout
    assert str(proc.returncode) in _list(d, "RestartPreventExitStatus"), proc.stderr
    assert "worker-agent.service" in _list(d, "After") + _list(d, "Wants")
    assert "luna-agent.service" in _list(_directives(WORKER), "Before")


def _worker_command() -> tuple[str, list[str]]:
    """(the /bin/sh prelude, llama-server's argv) of the worker's ExecStart wrapper."""
    cmd = _value(_directives(WORKER), "ExecStart")
    script = re.match(r"/bin/sh -c '(.*)'$", cmd, re.S)
    assert script, cmd
    prelude, _, rest = script.group(1).partition("exec ")
    return prelude, shlex.split(rest)


def _flag(argv: list[str], *names: str) -> str:
    for i, arg in enumerate(argv):
        if arg in names:
            return argv[i + 1]
    raise AssertionError(f"llama-server is started without {names[0]}")


def test_worker_serves_the_endpoint_model_and_context_luna_uses(tmp_path: Path) -> None:
    _, argv = _worker_command()
    assert argv[0].endswith("/llama-server")
    cfg, _ = _luna_under_the_unit(tmp_path)
    endpoint = urlparse(cfg.llm.endpoint)
    host, port = _flag(argv, "--host"), int(_flag(argv, "--port"))
    assert ipaddress.ip_address(host).is_loopback  # never reachable from the network
    assert port == endpoint.port and endpoint.hostname in ("localhost", host)
    assert _flag(argv, "--alias") == cfg.llm.model
    assert int(_flag(argv, "-c", "--ctx-size")) == cfg.llm.context_tokens


def test_worker_api_key_comes_from_the_environment_never_argv() -> None:
    """The /bin/sh wrapper keeps a set key in the environment and unsets an empty one."""
    prelude, argv = _worker_command()
    assert "--api-key" not in argv and not any("API_KEY" in a for a in argv)
    assert _value(_directives(WORKER), "EnvironmentFile").startswith("-")
    for value, expect in (("sekrit", "k=sekrit"), ("", "k=unset")):
        probe = subprocess.run(
            ["/bin/sh", "-c", prelude + 'echo "k=${LLAMA_API_KEY-unset}"'],
            env={"PATH": "/usr/bin:/bin", "LLAMA_API_KEY": value},
            capture_output=True,
            text=True,
            check=True,
        )
        assert probe.stdout.strip() == expect


def _verify(units: list[Path]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_systemd_analyze(), "verify", *map(str, units)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _rewritten(src: Path, dest_dir: Path) -> Path:
    text = src.read_text()
    text = text.replace("/opt/luna/.venv/bin/python", "/bin/true")
    text = re.sub(r"^User=luna$", "User=root", text, flags=re.M)
    text = re.sub(r"^Group=luna$", "Group=root", text, flags=re.M)
    out = dest_dir / src.name
    out.write_text(text)
    return out
