"""One message per process, as scripts and cron drive Luna: the embedding model's export that the
first short run starts outlives it, and a later run on the same new data folder recalls with
vectors (issue 36: every run was keyword-only, and each paid for an export it never finished)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.fakes.llm_server import FakeLLMServer
from tests.ops.running_luna import luna_env, wait_for

MESSAGES = [
    "my bike is red and it lives in the garden shed",
    "the plumber comes on Thursday at nine",
    "where do I keep my bicycle?",
    "what colour is my bike?",
]
NOT_READY = "the embedding model is being prepared in the background"


def _one_shot(tmp_path: Path, endpoint: str, text: str, cache: Path) -> str:
    """``echo TEXT | python -m luna``; returns its stderr."""
    proc = subprocess.run(
        [sys.executable, "-m", "luna"],
        cwd=tmp_path,
        env=luna_env(tmp_path, endpoint, LUNA_CACHE_DIR=str(cache)),
        input=text + "\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stderr


def _recall_modes_per_run(log_dir: Path) -> list[list[str]]:
    """Each run's recall modes, in order, from Luna's JSON log lines."""
    runs: list[list[str]] = []
    for path in sorted(log_dir.glob("luna-*.jsonl")):
        for line in path.read_text().splitlines():
            event = json.loads(line)
            if event.get("event") == "start":
                runs.append([])
            elif event.get("event") == "memory_op" and event.get("op") == "recall":
                runs[-1].append(str(event.get("mode")))
    return runs


def test_short_runs_on_a_new_data_folder_reach_hybrid_recall(
    tmp_path: Path, llm_server: FakeLLMServer
) -> None:
    cache = tmp_path / "machine-cache"  # a machine where nothing was prepared at install time
    models = cache / "luna" / "embedding-models"
    errs = [_one_shot(tmp_path, llm_server.url, text, cache) for text in MESSAGES[:2]]
    # Both runs have exited; the export the first one started goes on, and nobody started
    # a second one (the second run found it under way).
    for err in errs:
        assert sum(NOT_READY in line for line in err.splitlines()) == 1, err
    log = models / ".export-all-MiniLM-L6-v2-384.log"
    wait_for(lambda: "exported to" in log.read_text(), "the detached export", timeout=600)
    assert log.read_text().count("1/4 loading torch") == 1, log.read_text()
    assert any(models.glob("*/manifest.json"))
    errs += [_one_shot(tmp_path, llm_server.url, text, cache) for text in MESSAGES[2:]]
    for err in errs[2:]:
        assert NOT_READY not in err, err
    modes = _recall_modes_per_run(tmp_path / "data" / "logs")
    assert len(modes) == 4 and modes[0] == ["fts_warming"], modes
    assert "hybrid" in modes[2] + modes[3], modes
    assert not any((tmp_path / "data" / "models").glob("*/manifest.json"))  # the machine's
