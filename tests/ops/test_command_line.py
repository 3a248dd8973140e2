"""The command line: running Luna loads only what running needs; every command still parses."""

from __future__ import annotations

import subprocess
import sys

import pytest

from luna.__main__ import build_parser, runs_luna

COMMAND_MODULES = ("luna.config.cli", "luna.doctor.replay", "luna.scheduler.cli", "tomlkit")


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
    for argv, expected in ((["repl"], "[]"), (["stats"], str(list(COMMAND_MODULES)))):
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
