"""``luna doctor``'s webhook checks: the secret, the delivery target, the template's size, and
whether anything serves the hooks; as a real ``luna doctor --only hooks`` process too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from luna.config import build_config
from luna.doctor.hooks import check_hooks
from luna.doctor.result import CheckResult
from tests.luna_process import REPO, clean_env

SECRET = "c3a9e1f7b5d2084a6e8c0f2b4d6a8c1e3f5b7d9a0c2e4f6b8d1a3c5e7f9b0d2a"
TOKEN = "MTIzNDU2Nzg5MDEyMzQ1Njc4.GaBcDe.abcdefghijklmnopqrstuvwxyz0123"


async def doctor(tmp_path: Path, hooks: dict, env: dict | None = None, **more: Any) -> list:
    data = {"hooks": hooks, "web": {"enabled": True}, **more}
    cfg = build_config(data, {"LUNA_HOOK_DOOR_SECRET": SECRET, **(env or {})}, base_dir=tmp_path)
    return [(r.name, r.ok, r.essential, r.detail) for r in await check_hooks(cfg)]


async def test_doctor_hooks_a_good_hook_says_where_it_listens_and_delivers(tmp_path: Path) -> None:
    (line,) = await doctor(tmp_path, {"door": {"deliver_to": "web"}})
    name, ok, _, detail = line
    assert name == "hook door" and ok is True
    assert "POST /hooks/door" in detail and "LUNA_HOOK_DOOR_SECRET" in detail
    assert SECRET not in detail and "web (session_id hook-door)" in detail


async def test_doctor_hooks_each_problem_is_a_line_with_its_weight(tmp_path: Path) -> None:
    assert await doctor(tmp_path, {}) == [
        ("webhooks", None, False, "skipped (none configured: [hooks.NAME] in config.toml)")
    ]
    missing = await doctor(tmp_path, {"door": {}}, env={"LUNA_HOOK_DOOR_SECRET": ""})
    assert missing == [("hook door", False, True, "LUNA_HOOK_DOOR_SECRET is not set")]
    weak = await doctor(tmp_path, {"door": {}}, env={"LUNA_HOOK_DOOR_SECRET": "ab" * 20})
    assert "too little variety" in weak[0][3] and weak[0][2] is True
    short = await doctor(tmp_path, {"door": {}}, env={"LUNA_HOOK_DOOR_SECRET": "Zq3-pX9v_Lm2"})
    assert "shorter than 32 characters" in short[0][3]
    nowhere = await doctor(tmp_path, {"door": {"deliver_to": "pager"}})
    assert nowhere[0][1:3] == (False, True) and "unknown front-end 'pager'" in nowhere[0][3]
    discord = {"deliver_to": {"frontend": "discord", "channel_id": "42"}}
    no_bot = await doctor(tmp_path, {"door": discord})
    assert "DISCORD_TOKEN is not set" in no_bot[0][3]
    assert (await doctor(tmp_path, {"door": discord}, env={"DISCORD_TOKEN": TOKEN}))[0][1]
    bad_id = {"deliver_to": {"frontend": "discord", "channel_id": "general"}}
    assert "is a number" in (await doctor(tmp_path, {"door": bad_id}))[0][3]
    no_owner = await doctor(tmp_path, {"door": {"deliver_to": "discord"}})
    assert "discord.owner_id" in no_owner[0][3]
    big = await doctor(tmp_path, {"door": {"max_body_bytes": 1_048_576}})
    assert big[0][1:3] == (False, False) and "more than half of llm.context_tokens" in big[0][3]
    off = await doctor(tmp_path, {"door": {}}, scheduler={"enabled": False})
    assert ("webhooks", False, True) == off[0][:3] and "scheduler" in off[0][3]
    unserved = await doctor(tmp_path, {"door": {}}, web={"enabled": False})
    assert unserved[0][:3] == ("webhooks", False, False) and "web front-end" in unserved[0][3]


def test_doctor_hooks_command_reports_them(tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text(
        f'[observe]\nlog_dir = "{tmp_path / "logs"}"\n[memory]\ndb_path = "{tmp_path / "l.db"}"'
        '\n[web]\nenabled = true\n[hooks.door]\ndeliver_to = "web"\n[hooks.cron]\n'
    )
    proc = subprocess.run(
        [sys.executable, "-m", "luna", "--config", str(config), "doctor", "--only", "hooks"],
        cwd=REPO,
        env=clean_env(LUNA_HOOK_DOOR_SECRET=SECRET),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # cron has no secret
    assert "hook door: POST /hooks/door" in proc.stdout  # ✓ (or OK on an ASCII terminal)
    assert "hook cron: LUNA_HOOK_CRON_SECRET is not set" in proc.stdout
    assert "fix: make one with: openssl rand -hex 32 and set LUNA_HOOK_CRON_SECRET" in proc.stdout
    assert SECRET not in proc.stdout + proc.stderr
    as_json = subprocess.run(
        [sys.executable, "-m", "luna", "--config", str(config), "doctor", "--only", "hooks",
         "--json"],
        cwd=REPO, env=clean_env(LUNA_HOOK_DOOR_SECRET=SECRET, LUNA_HOOK_CRON_SECRET=SECRET[::-1]),
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    checks = [CheckResult(**c) for c in json.loads(as_json.stdout)["checks"]]
    assert as_json.returncode == 0 and [c.ok for c in checks] == [True, True]
