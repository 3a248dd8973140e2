"""No pattern in Luna takes ``name\\n`` for ``name``: Python's ``$`` also matches before a final
newline, so every pattern that checks a whole value ends in ``\\Z`` or is used with
``fullmatch``. A sweep over every regular expression in luna/, then each id checked for real.
"""

from __future__ import annotations

import ast
import base64
import datetime as dt
import json
from pathlib import Path

from luna.config.secrets import discord_token_problem
from luna.frontends.web.turns import valid_session_id
from luna.mcp.config import parse_servers
from luna.observe import stats
from tests.luna_process import REPO

RE_CALLS = {"compile", "match", "search", "fullmatch", "sub", "subn", "split", "findall"}
# (module, pattern) pairs whose final ``$`` cannot accept an extra newline, and why.
ALLOWED: dict[tuple[str, str], str] = {
    ("luna/agent/fit.py", r"\n\[large output of [^\n]*saved to [^\n]*\]\s*(?:</untrusted>)?\s*$"):
        r"\s* before $ already takes any trailing newline; it finds a footer, checks no id",
}  # fmt: skip


def _pattern(node: ast.expr) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        last = node.values[-1]
        if isinstance(last, ast.Constant) and isinstance(last.value, str):
            return last.value
    return None


def _is_multiline(call: ast.Call) -> bool:
    return any(
        isinstance(n, ast.Attribute) and n.attr in ("M", "MULTILINE") for n in ast.walk(call)
    )


def dollar_patterns(path: Path) -> list[str]:
    """Patterns in ``path`` given to ``re`` that end in an unescaped ``$`` without MULTILINE."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in RE_CALLS or not node.args:
            continue
        if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "re"):
            continue
        pattern = _pattern(node.args[0])
        if pattern and pattern.endswith("$") and not pattern.endswith("\\$"):
            if not _is_multiline(node):
                found.append(pattern)
    return found


def test_no_pattern_in_luna_lets_a_trailing_newline_through() -> None:
    problems = []
    for path in sorted((REPO / "luna").rglob("*.py")):
        rel = str(path.relative_to(REPO))
        for pattern in dollar_patterns(path):
            if (rel, pattern) not in ALLOWED:
                problems.append(f"{rel}: {pattern!r} (end it with \\Z or use fullmatch)")
    assert not problems, "\n".join(problems)


def test_the_sweep_sees_a_dollar_pattern(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import re\nA = re.compile(r'^[a-z]+$')\nB = re.compile(r'^x$', re.M)\n"
        "C = re.compile(r'[a-z]+')\nD = re.compile(r'cost \\$')\n"
    )
    assert dollar_patterns(probe) == ["^[a-z]+$"]


def test_every_id_refuses_a_trailing_newline(tmp_path: Path) -> None:
    good_token = base64.urlsafe_b64encode(b"112233445566778899").decode().rstrip("=")
    good_token += ".GhAbCd." + "x" * 38
    assert discord_token_problem(good_token) is None
    assert discord_token_problem(good_token + "\n") is not None
    assert valid_session_id("web-1") and not valid_session_id("web-1\n")
    servers = parse_servers(
        {"servers": {"time": {"command": "x"}, "time\n": {"command": "x"}}},
        {},
        path=Path("x.json"),
    )
    errors = {s.name: s.error for s in servers.servers}
    assert errors["time"] is None and "server name" in (errors["time\n"] or "")
    # A log file named with a trailing newline is not one of Luna's daily logs.
    today = dt.datetime.now(dt.UTC)
    (tmp_path / f"luna-{today.date().isoformat()}.jsonl\n").write_text(
        json.dumps({"ts": today.isoformat(), "event": "turn", "rounds": 1}) + "\n"
    )
    read = list(stats.events(tmp_path, today - dt.timedelta(days=1), today))
    assert read == []
