"""``luna memory list / search / stats`` as real subprocesses on stored hostile text: OSC 52,
8-bit C1 codes, ESC sequences and bidirectional controls are shown, never sent raw to the
terminal; ``--json`` keeps the value (escaped as ``\\u``)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.ops.data_files import make_db
from tests.ops.running_luna import run_luna

HOSTILE = "the boat \x1b]52;c;SGVsbG8=\x07 is \x9b31m red \u202eevil\x1b[2J"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


def test_memory_commands_neutralize_escape_codes(tmp_path: Path) -> None:
    make_db(tmp_path / "data" / "luna.db", [HOSTILE])
    shown = []
    for args in (("list",), ("list", "--json"), ("search", "boat"), ("search", "boat", "--json")):
        done = run_luna(tmp_path, "http://127.0.0.1:9/v1", "memory", *args)
        assert done.returncode == 0, (args, done.stderr)
        assert "boat" in done.stdout, (args, done.stdout)
        assert not [c for c in RAW if c in done.stdout], (args, done.stdout)
        shown.append(done.stdout)
    assert "␛]52;c;SGVsbG8=␇" in shown[0] and "\\x9b31m" in shown[0] and "\\u202e" in shown[0]
    assert json.loads(shown[1])["text"] == HOSTILE
    assert json.loads(shown[3])["results"][0]["text"] == HOSTILE
