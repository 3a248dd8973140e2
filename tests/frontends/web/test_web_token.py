"""LUNA_WEB_TOKEN must be a secret worth the name: blank, short, repeated, periodic and
counting tokens are refused before anything listens, with how to make a good one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from luna.config import build_config
from luna.config.secrets import web_token_problem
from luna.errors import ConfigError
from luna.frontends.web import check
from tests.frontends.web.conftest import TOKEN
from tests.luna_process import data_env

WEAK_TOKENS = [" " * 16, "a" * 16, "ab" * 8, "abcdefghijklmnop", "0123456789abcdef", " " + TOKEN]


@pytest.mark.parametrize("weak", WEAK_TOKENS, ids=repr)
def test_check_refuses_a_blank_or_low_entropy_token(weak: str, tmp_path: Path) -> None:
    cfg = build_config({"web": {"enabled": True}}, {"LUNA_WEB_TOKEN": weak}, base_dir=tmp_path)
    with pytest.raises(ConfigError, match="LUNA_WEB_TOKEN") as caught:
        check(cfg)
    assert "secrets.token_urlsafe" in str(caught.value) and "\n" not in str(caught.value)


def test_luna_web_refuses_to_start_with_a_token_of_sixteen_spaces(tmp_path: Path) -> None:
    (tmp_path / "mcp_servers.json").write_text('{"servers": {}}')
    env = data_env(tmp_path, "http://127.0.0.1:9/v1", LUNA_WEB_TOKEN=" " * 16)
    proc = subprocess.run(
        [sys.executable, "-m", "luna", "web", "--no-embedded"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("luna: web: LUNA_WEB_TOKEN"), lines
    assert "secrets.token_urlsafe" in lines[0] and "Traceback" not in proc.stderr


def test_random_tokens_pass_the_entropy_rule() -> None:
    import secrets

    for make in (lambda: secrets.token_urlsafe(12), lambda: secrets.token_hex(8)):
        for _ in range(2000):
            token = make()
            assert web_token_problem(token) is None, token
    assert web_token_problem(TOKEN) is None
    assert web_token_problem("correct horse battery staple") is None
