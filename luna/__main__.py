"""Command line: ``python -m luna [command]``. Argument parsing and one ``asyncio.run``; no logic.

Without a command Luna runs: the Discord bot when ``DISCORD_TOKEN`` is set, else the REPL.
Every command handler is ``async (args, cfg) -> exit code``; a LunaError becomes one line on
stderr, never a traceback: ``luna <command>: message`` from a command, ``luna: message``
before one runs and for a ConfigError (its message starts ``config:``). Exit codes: 2 for bad input
(usage, UsageError, ConfigError), 1 for a runtime failure, 130 on Ctrl-C, and 141 (as if
killed by SIGPIPE, quietly) when stdout is closed early (``luna config show | head -1``).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from luna import __version__
from luna.errors import ConfigError, LunaError, UsageError

if TYPE_CHECKING:  # loaded by the command that needs it
    from luna.config import Config

# The module that adds each command through ``add_parser(subparsers)``. A command named on the
# command line gets only its module imported (``luna memory list`` pays nothing for MCP's or
# the scheduler's imports); help, or a word that is no command, gets them all.
_COMMANDS = {
    "config": "luna.config.cli",
    "memory": "luna.memory.cli",
    "sessions": "luna.memory.sessions_cli",
    "backup": "luna.memory.db_cli",
    "restore": "luna.memory.db_cli",
    "db": "luna.memory.db_cli",
    "mcp": "luna.mcp.cli",
    "doctor": "luna.doctor.checks",
    "replay": "luna.doctor.replay",
    "stats": "luna.observe.stats",
    "schedule": "luna.scheduler.cli",
    "skills": "luna.skills.cli",
    "hooks": "luna.hooks.cli",
}
_COMMAND_MODULES = tuple(dict.fromkeys(_COMMANDS.values()))


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="luna",
        description=(
            "Luna, a self-hosted personal AI agent. With no command: runs the Discord bot when "
            "DISCORD_TOKEN is set, otherwise an interactive terminal session (REPL)."
        ),
        epilog="Configuration: config.toml (or $LUNA_CONFIG). See `luna config show`.",
    )
    parser.add_argument("--version", action="version", version=f"luna {__version__}")
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="config.toml to use (default: $LUNA_CONFIG or ./config.toml)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, summary, description in _RUN_HELP:
        _add_run_args(sub.add_parser(name, help=summary, description=description))
    if not runs_luna(argv):
        for name in _modules_for(argv):
            importlib.import_module(name).add_parser(sub)
    _add_run_args(parser)
    return parser


_RUN_COMMANDS = (None, "run", "repl", "web")
_RUN_HELP = (  # (command, one line in `luna --help`, what `luna COMMAND --help` explains)
    (
        "run",
        "run Luna (Discord bot if DISCORD_TOKEN is set, else the REPL)",
        "Run Luna, as `luna` with no command does: the Discord bot when DISCORD_TOKEN is set, "
        "otherwise a conversation in this terminal (the REPL); plus the web page when "
        "[web] enabled = true. Runs until Ctrl-D, /quit or SIGTERM.",
    ),
    (
        "repl",
        "talk to Luna in the terminal (even if DISCORD_TOKEN is set)",
        "Talk to Luna in this terminal, even when DISCORD_TOKEN is set. Ctrl-C cancels a reply, "
        "Ctrl-D or /quit exits; /help lists the commands. With input piped in, each line is "
        "one message; the exit code is 1 if a turn failed.",
    ),
    (
        "web",
        "run only the web page and HTTP API (needs LUNA_WEB_TOKEN; see [web])",
        "Run only the web page and its HTTP API (an OpenAI-compatible endpoint too), without "
        "Discord or a terminal conversation, whatever [web] enabled says. Needs LUNA_WEB_TOKEN "
        "in the environment; the address is [web] host and port.",
    ),
)
_OPTIONS_WITH_VALUE = ("--config", "--session")


def _first_word(args: list[str]) -> str | None:
    i = 0
    while i < len(args):
        if args[i] in _OPTIONS_WITH_VALUE:
            i += 2
            continue
        if not args[i].startswith("-"):
            return args[i]
        i += 1
    return None


def _modules_for(argv: Sequence[str] | None) -> tuple[str, ...]:
    """The command modules to import for ``argv`` (see ``_COMMANDS``)."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = _first_word(args)
    if command in _COMMANDS and not ({"-h", "--help"} & set(args[: args.index(command)])):
        return (_COMMANDS[command],)
    return _COMMAND_MODULES


def runs_luna(argv: Sequence[str] | None) -> bool:
    """Whether ``argv`` runs Luna itself (no command, ``run``, ``repl`` or ``web``) without
    asking for help: then the other commands' modules are not imported (about 1 MB of the
    running process and their import time)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:
        return False
    return _first_word(args) in _RUN_COMMANDS


def _add_run_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--session", metavar="ID", help="REPL session id to resume (default: the last one)"
    )
    p.add_argument("--no-embedded", action="store_true", help="never start the embedded demo model")
    p.add_argument(
        "--fresh-database",
        action="store_true",
        help="start with a new, empty database although the data folder shows one existed "
        "(the old database files are renamed aside, never deleted)",
    )


def command_name(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> str:
    """``luna`` and the subcommands named in ``argv``: ``luna memory search``."""
    args = list(sys.argv[1:] if argv is None else argv)
    names, current, i = ["luna"], parser, 0
    while i < len(args):
        arg = args[i]
        i += 2 if arg in _OPTIONS_WITH_VALUE else 1
        if arg.startswith("-"):
            continue
        subs = [a for a in current._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs or arg not in subs[0].choices:
            break
        names.append(arg)
        current = subs[0].choices[arg]
    return " ".join(names)


def _check_config(cfg: Config) -> None:
    """Start-up's checks across keys (imported only when a command asks)."""
    from luna.scheduler.heartbeat import check_config

    check_config(cfg)


def _closed_stdout() -> int:
    """The reader of stdout went away: say nothing, and let the interpreter's last flush
    find somewhere to write."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141  # 128 + SIGPIPE, what `yes | head` leaves in $PIPESTATUS


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    where = "luna"  # until a command runs
    try:
        from pathlib import Path

        from luna.config import load_config

        cfg = load_config(Path(args.config) if args.config else None)
        handler = getattr(args, "handler", None)
        if handler is None:
            from luna.app import run_app

            mode = args.command if args.command in ("repl", "web") else "auto"
            return asyncio.run(run_app(cfg, args, mode=mode))
        where = command_name(parser, argv)
        args.check_config = _check_config  # for `config set`: config sits below the scheduler
        code = asyncio.run(handler(args, cfg))
        sys.stdout.flush()  # here, where a closed stdout is caught, not at exit
        return code
    except BrokenPipeError:
        return _closed_stdout()
    except ConfigError as e:  # about the configuration, whichever command: "luna: config: ..."
        print(f"luna: {e}", file=sys.stderr)
        return 2
    except UsageError as e:
        print(f"{where}: {e}", file=sys.stderr)
        return 2
    except LunaError as e:
        print(f"{where}: {e}", file=sys.stderr)
        return 1
    except OSError as e:  # a folder Luna cannot create, a file it cannot write, ...
        print(f"{where}: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
