"""mcp_servers.json validation, ${VAR} expansion, name sanitizing, schema and result adaptation."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from luna.mcp.config import (
    load_servers,
    parse_servers,
    qualify_names,
    server_env,
    to_parameters,
)
from tests.luna_process import REPO

NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def parse(servers: dict, environ: dict | None = None):
    return parse_servers({"servers": servers}, environ or {}, path=Path("x.json"), call_timeout=7)


def test_parse_servers_valid_stdio_and_http_entries() -> None:
    f = parse(
        {
            "time": {"command": "python", "args": ["-m", "mcp_server_time"]},
            "web": {"url": "http://127.0.0.1:9/mcp", "headers": {"X-A": "b"}, "expose": "catalog"},
        }
    )
    assert f.error is None
    time_, web = f.servers
    assert (time_.transport, time_.command, time_.args, time_.timeout) == (
        "stdio", sys.executable, ["-m", "mcp_server_time"], 7.0,
    )  # fmt: skip
    assert (web.transport, web.url, web.headers, web.expose) == (
        "http", "http://127.0.0.1:9/mcp", {"X-A": "b"}, "catalog",
    )  # fmt: skip
    assert all(s.error is None and s.enabled for s in f.servers)


def test_parse_servers_bad_entries_are_reported_by_name_and_others_kept() -> None:
    f = parse(
        {
            "good": {"command": "python"},
            "typo": {"comand": "python"},
            "nocmd": {"args": []},
            "badexpose": {"command": "x", "expose": "sometimes"},
            "bad__name": {"command": "x"},
            "badtimeout": {"command": "x", "timeout": -1},
            "mixed": {"command": "x", "url": "http://a"},
        }
    )
    errors = {s.name: s.error for s in f.servers}
    assert errors["good"] is None
    assert "did you mean 'command'" in errors["typo"]
    assert "needs a 'command'" in errors["nocmd"]
    assert "expose" in errors["badexpose"]
    assert "server name" in errors["bad__name"]
    assert "timeout" in errors["badtimeout"]
    assert errors["mixed"] is not None


def test_parse_servers_explains_wrong_types_and_bounds_in_one_line() -> None:
    f = parse(
        {
            "inf": {"command": "x", "timeout": float("inf")},
            "booltimeout": {"command": "x", "timeout": True},
            "intarg": {"command": "x", "args": ["a", 3]},
            "envnum": {"command": "x", "env": {"K": 1}},
            "yes": {"command": "x", "enabled": "yes"},
            "perm": {"command": "x", "permission": "maybe"},
            "both": {"transport": "http", "command": "x", "url": "http://a"},
            "fromvar": {"url": "${BASE}/mcp"},
            "int": {"command": "x", "timeout": 5},
        },
        {"BASE": "http://h"},
    )
    errors = {s.name: s.error for s in f.servers}
    assert errors["inf"] == errors["booltimeout"] == "timeout must be a positive number of seconds"
    assert errors["intarg"] == "args[1] must be a string"
    assert errors["envnum"] == "env.K must be a string"
    assert errors["yes"] == "enabled must be true or false"
    assert errors["perm"] == "permission must be one of 'allow', 'ask' or 'deny'"
    assert errors["both"] == "'command' only applies to the stdio transport"
    by_name = {s.name: s for s in f.servers}
    assert by_name["fromvar"].error is None and by_name["fromvar"].url == "http://h/mcp"
    assert by_name["int"].error is None and by_name["int"].timeout == 5.0


def test_parse_servers_expands_env_and_refuses_unset_variables_without_echoing() -> None:
    f = parse(
        {
            "a": {"command": "x", "env": {"TOKEN": "${MY_TOKEN}", "FIXED": "1"}},
            "b": {"command": "x", "env": {"TOKEN": "${NOT_SET_ANYWHERE}"}},
            "c": {"url": "https://h/mcp", "headers": {"Authorization": "Bearer ${MY_TOKEN}"}},
        },
        {"MY_TOKEN": "s3cret"},
    )
    a, b, c = f.servers
    assert a.env == {"TOKEN": "s3cret", "FIXED": "1"}
    assert "NOT_SET_ANYWHERE" in b.error and "s3cret" not in b.error
    assert c.headers == {"Authorization": "Bearer s3cret"}


def test_server_env_passes_only_named_variables_and_a_safe_base() -> None:
    environ = {
        "PATH": "/usr/bin",
        "HOME": "/home/luna",
        "LANG": "C.UTF-8",
        "DISCORD_TOKEN": "discord-secret",
        "LLM_API_KEY": "llm-secret",
        "OTHER": "x",
    }
    (spec,) = parse({"s": {"command": "x", "env": {"ONLY": "${OTHER}"}}}, environ).servers
    env = server_env(spec, environ)
    assert env == {"PATH": "/usr/bin", "HOME": "/home/luna", "LANG": "C.UTF-8", "ONLY": "x"}
    named_file = parse(
        {"s": {"command": "x", "env": {"DISCORD_TOKEN": "${DISCORD_TOKEN}"}}}, environ
    )
    (named,) = named_file.servers
    assert server_env(named, environ)["DISCORD_TOKEN"] == "discord-secret"


def test_load_servers_missing_file_is_empty_and_bad_json_is_reported(tmp_path: Path) -> None:
    assert load_servers(tmp_path / "absent.json", {}).servers == []
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    result = load_servers(bad, {})
    assert result.servers == [] and "not valid JSON" in result.error


def test_load_servers_accepts_claude_desktop_spelling(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"mcpServers": {"t": {"command": "x"}}}))
    assert [s.name for s in load_servers(path, {}).servers] == ["t"]


def test_repo_default_servers_file_is_valid() -> None:
    path = REPO / "mcp_servers.json"
    parsed = load_servers(path, {})
    assert parsed.error is None, parsed.error
    by_name = {s.name: s for s in parsed.servers}
    assert by_name["time"].enabled and by_name["time"].error is None
    assert by_name["browser"].expose == "catalog" and not by_name["browser"].enabled


def test_qualify_names_sanitizes_truncates_and_resolves_collisions_predictably() -> None:
    names = qualify_names("srv", ["get.item", "get_item", "get item", "x" * 100, "ok-name"])
    assert all(NAME_RE.match(n) for n in names.values())
    assert len(set(names.values())) == len(names)
    # Sorted by original name: "get item" < "get.item" < "get_item".
    assert names["get item"] == "srv__get_item"
    assert names["get.item"] == "srv__get_item_2"
    assert names["get_item"] == "srv__get_item_3"
    assert names["ok-name"] == "srv__ok-name"
    assert len(names["x" * 100]) == 64
    # Same input in another order -> same mapping.
    again = qualify_names("srv", ["ok-name", "x" * 100, "get_item", "get item", "get.item"])
    assert again == names


def test_to_parameters_makes_a_function_calling_object_schema() -> None:
    params = to_parameters(
        {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": "addArguments",
            "type": "object",
            "properties": {"a": {"type": "integer"}},
            "required": ["a"],
        }
    )
    assert params == {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    assert to_parameters(None) == {"type": "object", "properties": {}}
