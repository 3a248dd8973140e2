"""The command line: running Luna loads only what running needs; every command still parses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from luna.__main__ import build_parser, runs_luna
from tests.luna_process import data_env

COMMAND_MODULES = (
    "luna.config.cli",
    "luna.doctor.replay",
    "luna.scheduler.cli",
    "tomlkit",
    "luna.mcp.manager",  # only when an mcp command runs: not even for the help
)


@pytest.mark.parametrize(
    ("argv", "runs"),
    [
        ([], True),
        (["repl"], True),
        (["--config", "c.toml", "--session", "memory", "repl"], True),  # values, not commands
        (["--session=doctor"], True),
        (["web", "--no-embedded"], True),
        (["run", "--help"], False),
        (["-h"], False),
        (["memory", "search", "tulips"], False),
        (["--config", "c.toml", "doctor"], False),
        (["memroy"], False),  # a typo gets the full list of commands to choose from
    ],
)
def test_runs_luna_tells_running_from_the_other_commands(argv: list[str], runs: bool) -> None:
    assert runs_luna(argv) is runs


def test_running_luna_imports_no_command_module() -> None:
    probe = (
        "import sys; from luna.__main__ import build_parser; build_parser({argv!r}); "
        f"print([m for m in {COMMAND_MODULES!r} if m in sys.modules])"
    )
    # A named command imports its own module only; help lists them all.
    for argv, expected in (
        (["repl"], "[]"),
        (["stats"], "[]"),
        (["config", "show"], "['luna.config.cli', 'tomlkit']"),
        (["--help"], str(list(COMMAND_MODULES[:-1]))),
    ):
        out = subprocess.run(
            [sys.executable, "-c", probe.format(argv=argv)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        assert out == expected, (argv, out)


def test_every_command_still_parses() -> None:
    parser = build_parser(["--help"])
    args = parser.parse_args(["schedule", "list", "--json"])
    assert args.handler is not None
    args = parser.parse_args(["repl", "--session", "s1"])
    assert args.command == "repl" and args.session == "s1"


def _luna(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "luna", *args],
        cwd=tmp_path,
        env=data_env(tmp_path, "http://127.0.0.1:9/v1", **env),
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("command", "says"),
    [("run", "DISCORD_TOKEN"), ("repl", "Ctrl-C cancels a reply"), ("web", "LUNA_WEB_TOKEN")],
)
def test_run_commands_help_describes_them(tmp_path: Path, command: str, says: str) -> None:
    proc = _luna(tmp_path, command, "--help")
    assert proc.returncode == 0, proc.stderr
    description = " ".join(proc.stdout.split("\n\n")[1].split())  # after the usage line
    assert says in description and not description.startswith("options:"), proc.stdout


def test_luna_web_without_a_token_suggests_only_what_applies(tmp_path: Path) -> None:
    alone = _luna(tmp_path, "web", "--no-embedded")
    assert alone.returncode == 2
    assert "LUNA_WEB_TOKEN" in alone.stderr and "web.enabled" not in alone.stderr
    # Beside the REPL, web.enabled is what added the page: turning it off is a way out.
    (tmp_path / "config.toml").write_text("[web]\nenabled = true\n")
    beside = _luna(tmp_path, "repl", "--no-embedded")
    assert beside.returncode == 2 and "web.enabled = false" in beside.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["stats", "--days", "0"],
        ["mcp", "call", "nope__tool", "{}"],
        ["mcp", "call", "nope__tool", "{"],
        ["--config", "config.toml", "mcp", "call", "nope__tool", "[]"],
        ["memory", "search", "-k", "0", "bikes"],
    ],
)
def test_bad_input_is_one_line_named_for_its_command_exit_2(
    tmp_path: Path, argv: list[str]
) -> None:
    (tmp_path / "mcp_servers.json").write_text('{"servers": {}}')
    (tmp_path / "config.toml").write_text("")
    proc = _luna(tmp_path, *argv)
    words = [a for a in argv if a in ("stats", "mcp", "call", "memory", "search")]
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"luna {' '.join(words)}: "), proc.stderr
    assert len(proc.stderr.splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("argv", [["config", "show"], ["memory", "list"], ["stats"]])
def test_a_closed_stdout_exits_quietly(tmp_path: Path, argv: list[str]) -> None:
    (tmp_path / "mcp_servers.json").write_text('{"servers": {}}')
    env = data_env(tmp_path, "http://127.0.0.1:9/v1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "luna", *argv],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before Luna writes (`luna ... | head -0`)
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == 141, err  # as a program killed by SIGPIPE
    assert err == "", err
