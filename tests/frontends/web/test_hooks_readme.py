"""The README's ``luna-hook.sh`` (``openssl`` + ``curl``), run as written against the real web
front-end: the plain JSON form a cron job uses, the base64 form Home Assistant uses, the
secret from the environment or from a file."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.frontends.web.test_hooks import SECRET, door_luna, settled
from tests.luna_process import REPO

SCRIPT = re.compile(r"```sh\n(#!/bin/sh\n# luna-hook\.sh .*?)```", re.DOTALL)


def readme_script(folder: Path) -> Path:
    (text,) = SCRIPT.findall((REPO / "README.md").read_text())
    path = folder / "luna-hook.sh"
    path.write_text(text)
    path.chmod(0o755)
    return path


async def run(script: Path, *args: str, env: dict[str, str]) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        str(script),
        *args,
        env={"PATH": os.environ["PATH"], **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode or 0, out.decode()


async def test_hooks_readme_script_signs_events_luna_accepts(
    web_luna: Callable[..., Any], llm_server: FakeLLMServer, tmp_path: Path
) -> None:
    luna = await door_luna(web_luna)
    llm_server.script(Reply(content="one"), Reply(content="two"), Reply(content="three"))
    script = readme_script(tmp_path)
    url = f"{luna.url}/hooks/door"
    event = {"entity": "binary_sensor.front_door", "note": 'it\'s "open" — 5 min'}
    code, out = await run(script, url, json.dumps(event), env={"LUNA_HOOK_SECRET": SECRET})
    assert code == 0 and json.loads(out)["accepted"] is True, out
    first = await settled(luna, json.loads(out)["event"])
    assert json.loads(first.body) == event
    packed = "base64:" + base64.b64encode(json.dumps({"to": "on"}).encode()).decode()
    (tmp_path / "luna-hook.secret").write_text(SECRET + "\n")
    code, out = await run(script, url, packed, env={})
    assert code == 0, out
    assert json.loads((await settled(luna, json.loads(out)["event"])).body) == {"to": "on"}
    (tmp_path / "other.secret").write_text("f" * 64)
    code, out = await run(script, url, "{}", str(tmp_path / "other.secret"), env={})
    assert code != 0 and "wrong signature" in out
    assert len(llm_server.requests) == 2
