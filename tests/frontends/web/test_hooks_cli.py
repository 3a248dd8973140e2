"""``luna hooks list|sign|test`` as real processes: ``sign`` prints the headers a caller sends,
``test`` sends a signed event to the running web front-end, which runs it."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from luna.hooks.signing import SIGNATURE_HEADER, TIMESTAMP_HEADER, problem
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.web.test_hooks import ENV, SECRET, door_luna, settled
from tests.luna_process import REPO, clean_env

CONFIG = '[hooks.door]\ndeliver_to = "web"\n'


def luna_cmd(tmp_path: Path, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    (tmp_path / "config.toml").write_text(CONFIG)
    return subprocess.run(
        [sys.executable, "-m", "luna", "--config", str(tmp_path / "config.toml"), *args],
        cwd=REPO,
        env=clean_env(**ENV),
        input=stdin,
        capture_output=True,
        timeout=120,
    )


def test_hooks_cli_sign_prints_the_headers_for_the_bytes_on_stdin(tmp_path: Path) -> None:
    body = b'{"state": "on"}\n'
    done = luna_cmd(tmp_path, "hooks", "sign", "door", "--at", "1765000000", stdin=body)
    assert done.returncode == 0, done.stderr
    headers = dict(line.split(": ", 1) for line in done.stdout.decode().splitlines())
    assert headers[TIMESTAMP_HEADER] == "1765000000"
    sent = headers[SIGNATURE_HEADER]
    assert problem(SECRET, "1765000000", sent, body, window=300, now=1765000000) is None
    assert problem(SECRET, "1765000000", sent, body.strip(), window=300, now=1765000000)
    listed = luna_cmd(tmp_path, "hooks", "list")
    assert listed.returncode == 0 and SECRET.encode() not in listed.stdout
    assert b"door: POST /hooks/door; secret in LUNA_HOOK_DOOR_SECRET; session hook-door" in (
        listed.stdout
    )
    unknown = luna_cmd(tmp_path, "hooks", "sign", "garage")
    assert unknown.returncode == 2 and b"there is no [hooks.garage]" in unknown.stderr


async def test_hooks_cli_test_sends_a_signed_event_to_the_running_luna(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    luna = await door_luna(web_luna)
    llm_server.script(Reply(content="Test event received."))
    (tmp_path / "config.toml").write_text(CONFIG)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "luna", "--config", str(tmp_path / "config.toml"),
        "hooks", "test", "door", "--url", luna.url,
        cwd=REPO, env=clean_env(**ENV),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode == 0, err
    assert out.decode().startswith('202 {"accepted": true, "hook": "door", "event": 1}')
    event = await settled(luna, 1)
    assert event.state == "done" and "luna hooks test" in event.body
