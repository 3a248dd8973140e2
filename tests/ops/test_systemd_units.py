"""systemd units: the real files carry the directives issue 7 asks for, and both pass
``systemd-analyze verify`` (with binary paths and the user rewritten to ones that exist here).

Needs the ``systemd`` Debian package (it provides systemd-analyze); CI installs it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.luna_process import REPO

ROOT = REPO
AGENT = ROOT / "luna-agent.service"
WORKER = ROOT / "worker-agent.service"


def _directives(path: Path) -> dict[str, list[str]]:
    """key -> values, joining backslash continuations and skipping comments."""
    text = re.sub(r"\\\n", " ", path.read_text())
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        out.setdefault(key.strip(), []).append(value.strip())
    return out


def _one(d: dict[str, list[str]], key: str) -> str:
    assert key in d, f"missing {key}="
    return d[key][-1]


def test_agent_unit_has_required_directives() -> None:
    d = _directives(AGENT)
    assert _one(d, "User") == "luna"
    assert _one(d, "WorkingDirectory") == "/opt/luna"
    assert _one(d, "ExecStart") == "/opt/luna/.venv/bin/python -m luna"
    assert "worker-agent.service" in _one(d, "After")
    assert "worker-agent.service" in _one(d, "Wants")
    assert "network-online.target" in _one(d, "After")
    assert _one(d, "EnvironmentFile").lstrip("-") == "/etc/luna/luna.env"
    assert _one(d, "Restart") == "on-failure"
    assert _one(d, "KillSignal") == "SIGTERM"
    # Above the agent's default shutdown grace (20 s) so turns can finish before SIGKILL.
    from luna.config import AgentConfig

    assert float(_one(d, "TimeoutStopSec")) > AgentConfig().shutdown_grace
    for key, value in {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ReadWritePaths": "/opt/luna/data",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "ProtectKernelTunables": "yes",
        "ProtectControlGroups": "yes",
        "RestrictSUIDSGID": "yes",
        "LockPersonality": "yes",
    }.items():
        assert _one(d, key) == value, key
    # bwrap needs user/mount/pid/net namespaces and mount(2): these must stay off.
    for forbidden in ("RestrictNamespaces", "PrivateUsers", "SystemCallFilter"):
        assert forbidden not in d, f"{forbidden}= would break bwrap"
    assert _one(d, "WantedBy") == "multi-user.target"


def test_worker_unit_has_required_llama_server_flags() -> None:
    d = _directives(WORKER)
    cmd = _one(d, "ExecStart")
    for flag in (
        "--split-mode layer",
        "--tensor-split 1,1",
        "-ngl 999",
        "-c 131072",
        "--cache-type-k q8_0",
        "--cache-type-v q8_0",
        "-fa on",
        "--jinja",
        "--reasoning-format deepseek",
        "--host 127.0.0.1",
        "--port 8001",
    ):
        assert flag in cmd, flag
    assert "0.0.0.0" not in cmd
    # The alias is the model name Luna asks for by default, and the port matches the endpoint.
    from luna.config import DEFAULT_ENDPOINT, DEFAULT_MODEL

    assert f"--alias {DEFAULT_MODEL}" in cmd
    assert DEFAULT_ENDPOINT.endswith(":8001/v1")
    # The API key comes from the environment file, never from argv.
    assert _one(d, "EnvironmentFile").startswith("-")
    assert "--api-key" not in cmd and "LLAMA_API_KEY" in cmd
    assert _one(d, "Restart") == "on-failure"
    assert "luna-agent.service" in _one(d, "Before")


def test_worker_wrapper_drops_empty_api_key() -> None:
    """The /bin/sh wrapper keeps a set key in the environment and unsets an empty one."""
    cmd = _one(_directives(WORKER), "ExecStart")
    script = re.match(r"/bin/sh -c '(.*)'$", cmd, re.S)
    assert script, cmd
    prelude, _, rest = script.group(1).partition("exec ")
    assert "llama-server" in rest
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
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.fail(
            "systemd-analyze is missing: install the Debian package `systemd` "
            "(apt-get install -y systemd) — CI's .ci/run must install it"
        )
    return subprocess.run(
        [exe, "verify", *map(str, units)],
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
