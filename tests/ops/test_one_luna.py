"""One Luna per data folder, through real ``python -m luna`` processes: a second REPL (or
daemon) is refused in one line naming the pid that holds the folder; reading commands and the
writing ones that are safe work beside it; ``kill -9`` frees the folder at once."""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.fakes.llm_server import FakeLLMServer
from tests.ops.running_luna import RunningLuna, run_luna


def test_second_luna_is_refused_naming_the_pid_and_kill_9_frees_the_folder(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    first = RunningLuna(tmp_path, llm_server.url)
    try:
        first.ready()
        for args in (("repl", "--no-embedded"), ("--no-embedded",)):
            second = run_luna(tmp_path, llm_server.url, *args, input="hello from the second\n")
            assert second.returncode == 1, second.stderr
            assert "Traceback" not in second.stderr
            (line,) = second.stderr.strip().splitlines()
            assert re.fullmatch(
                rf"luna: another Luna \(pid {first.proc.pid}, repl since [0-9: -]+\) is running "
                rf"on the data folder {re.escape(str(tmp_path / 'data'))}; stop it first .*",
                line,
            ), line
        assert llm_server.requests == []  # the refused ones never reached the model

        # Reading commands work beside it.
        for args in (
            ("memory", "list"),
            ("memory", "stats"),
            ("memory", "search", "anything"),
            ("stats",),
            ("config", "show"),
        ):
            done = run_luna(tmp_path, llm_server.url, *args)
            assert done.returncode == 0, (args, done.stderr)
            assert "Traceback" not in done.stderr

        # Writing commands: add and forget go through, and the running REPL sees them.
        added = run_luna(tmp_path, llm_server.url, "memory", "add", "the spare key is in the shed")
        assert added.returncode == 0, added.stderr
        first.say("/memories")
        first.wait(lambda: "the spare key is in the shed" in first.out, "REPL lists the memory")
        memory_id = re.search(r"remembered #(\d+)", added.stdout).group(1)
        forgot = run_luna(tmp_path, llm_server.url, "memory", "forget", memory_id)
        assert forgot.returncode == 0, forgot.stderr
        before = first.out.count("no memories yet")
        first.say("/memories")
        first.wait(lambda: first.out.count("no memories yet") > before, "REPL sees it gone")

        # config set is written, with a note that the running Luna reads it only at start.
        (tmp_path / "config.toml").write_text("[agent]\nmax_rounds = 25\n")
        setting = run_luna(tmp_path, llm_server.url, "config", "set", "agent.max_rounds", "7")
        assert setting.returncode == 0, setting.stderr
        assert f"note: Luna is running on this data folder (pid {first.proc.pid})" in (
            setting.stdout
        )
        assert "max_rounds = 7" in (tmp_path / "config.toml").read_text()

        # reindex goes through beside the running Luna, which goes on answering (from FTS for
        # what has no vector yet; luna.memory.cli).
        reindex = run_luna(tmp_path, llm_server.url, "memory", "reindex")
        assert reindex.returncode == 0 and "Traceback" not in reindex.stderr
        assert "re-embedded" in reindex.stdout
        before = first.out.count("no memories yet")
        first.say("/memories")
        first.wait(lambda: first.out.count("no memories yet") > before, "REPL answers after it")
    finally:
        first.kill9()

    # kill -9 left the lock file behind, but not the lock: the next Luna starts.
    assert (tmp_path / "data" / "luna.lock").exists()
    third = run_luna(tmp_path, llm_server.url, "repl", "--no-embedded", input="/session\n")
    assert third.returncode == 0, third.stderr
    assert "session repl-" in third.stdout
    stats = run_luna(tmp_path, llm_server.url, "memory", "stats", "--json")
    assert json.loads(stats.stdout)["memories"] == 0
