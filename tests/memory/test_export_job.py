"""The export job's lock: never two exports of one model at once, and an exporter that waited
for another's lock finds its entry and exits without exporting (no torch: seconds, not a minute).
The detached export outliving a short run is tests/ops/test_short_runs.py."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from luna.memory.embedding import export_job
from luna.memory.embedding import model_cache as cache
from tests.luna_process import REPO, clean_env

MODEL = "all-MiniLM-L6-v2"


def test_prepare_never_starts_a_second_export_while_one_holds_the_lock(tmp_path: Path) -> None:
    with export_job.holding_lock(tmp_path, MODEL, 384):
        assert export_job.is_under_way(tmp_path, MODEL, 384)
        outcome = export_job.prepare(tmp_path, MODEL, 384, timeout=0.3)  # two polls
        assert not outcome.ok and "still under way" in outcome.detail
        assert not export_job.log_path(tmp_path, MODEL, 384).exists()  # nothing was started
    assert not export_job.is_under_way(tmp_path, MODEL, 384)


def test_exporter_that_waited_for_the_lock_finds_the_entry_and_exits(tmp_path: Path) -> None:
    proc = None
    with export_job.holding_lock(tmp_path, MODEL, 384):  # "another export", under way
        proc = subprocess.Popen(
            [sys.executable, "-m", export_job.EXPORTER, "--detached", MODEL, "384", str(tmp_path)],
            cwd=REPO,
            env=clean_env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        time.sleep(3.0)  # it starts, and waits for the lock
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        key = cache.cache_key(MODEL, 384)  # the other export publishes, then lets go
        cache.publish(cache.new_tmp_dir(tmp_path, key), tmp_path, key, cache.MANIFEST, {})
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "already prepared by another export" in out and "loading torch" not in out


def test_prepare_waits_for_an_export_under_way_and_reports_it(tmp_path: Path) -> None:
    key = cache.cache_key(MODEL, 384)
    holding, released = threading.Event(), threading.Event()

    def other_export() -> None:
        with export_job.holding_lock(tmp_path, MODEL, 384):
            holding.set()
            time.sleep(0.6)  # the export under way, while prepare() below waits for it
            cache.publish(cache.new_tmp_dir(tmp_path, key), tmp_path, key, cache.MANIFEST, {})
        released.set()

    worker = threading.Thread(target=other_export)
    worker.start()
    assert holding.wait(10)
    outcome = export_job.prepare(tmp_path, MODEL, 384, timeout=30.0)
    worker.join()
    assert released.is_set() and outcome.ok
    assert cache.lookup(tmp_path, key) is not None
