"""``luna doctor --only web`` as a real process: where the page listens, whether the token is
worth the name, and whether the reverse proxy in front is trusted."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.luna_process import REPO

GOOD = "Zq3-pX9v_Lm2Rt7wKc4yHb8nJd6sFg1e"


def doctor_web(tmp_path: Path, web: str, token: str | None) -> tuple[int, dict[str, Any]]:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[observe]\nlog_dir = "{tmp_path / "logs"}"\n[memory]\n'
        f'db_path = "{tmp_path / "luna.db"}"\n[web]\n{web}\n'
    )
    env = {k: v for k, v in os.environ.items() if k != "LUNA_WEB_TOKEN"}
    if token is not None:
        env["LUNA_WEB_TOKEN"] = token
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "luna",
            "--config",
            str(config),
            "doctor",
            "--only",
            "web",
            "--json",
        ],
        cwd=REPO,
        env={**env, "PYTHONIOENCODING": "utf-8"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.stdout.strip(), proc.stderr
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    return proc.returncode, checks


def test_doctor_web_warns_about_a_lan_bind_and_fails_a_weak_token(tmp_path: Path) -> None:
    code, checks = doctor_web(tmp_path, 'enabled = true\nhost = "0.0.0.0"', "a" * 16)
    bind, token = checks["web bind address"], checks["web token"]
    assert bind["ok"] is False and not bind["essential"]
    assert "0.0.0.0" in bind["detail"] and "TLS" in bind["detail"]
    assert "127.0.0.1" in bind["fix"] and "reverse proxy" in bind["fix"]
    assert token["ok"] is False and token["essential"] and "a" * 16 not in json.dumps(token)
    assert "secrets.token_urlsafe" in token["fix"]
    assert code == 1


def test_doctor_web_passes_a_loopback_bind_a_good_token_and_a_trusted_proxy(
    tmp_path: Path,
) -> None:
    code, checks = doctor_web(
        tmp_path, 'enabled = true\nhost = "127.0.0.1"\ntrusted_proxies = ["127.0.0.1"]', GOOD
    )
    assert code == 0, checks
    for name in ("web bind address", "web token", "web proxy"):
        assert checks[name]["ok"] is True, checks[name]
    assert GOOD not in json.dumps(checks)
    assert "127.0.0.1" in checks["web proxy"]["detail"]


def test_doctor_web_names_a_proxy_that_is_not_trusted(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    logs.mkdir()
    now = dt.datetime.now(dt.UTC)
    event = {"ts": now.isoformat(timespec="milliseconds"), "event": "web_untrusted_proxy"}
    (logs / f"luna-{now.date().isoformat()}.jsonl").write_text(
        json.dumps({**event, "peer": "127.0.0.1"}) + "\n"
    )
    code, checks = doctor_web(tmp_path, "enabled = true", GOOD)
    proxy = checks["web proxy"]
    assert proxy["ok"] is False and not proxy["essential"], proxy
    assert "127.0.0.1" in proxy["detail"] and "web.trusted_proxies" in proxy["fix"]
    assert code == 0  # a warning


def test_doctor_web_warns_when_anyone_is_a_trusted_proxy(tmp_path: Path) -> None:
    _, checks = doctor_web(tmp_path, 'enabled = true\ntrusted_proxies = ["0.0.0.0/0"]', GOOD)
    proxy = checks["web proxy"]
    assert proxy["ok"] is False and "0.0.0.0/0" in proxy["detail"]


def test_doctor_web_is_skipped_when_the_web_is_off(tmp_path: Path) -> None:
    code, checks = doctor_web(tmp_path, "enabled = false", None)
    assert code == 0 and list(checks) == ["web"] and checks["web"]["ok"] is None
