"""``luna doctor`` says where the prepared embedding model lives and whether it is ready; it
only looks (no export here: entries are published by hand, with the real key)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from luna.config import Config
from luna.doctor.embedding import prepared_model_result
from luna.memory.embedding import export_job
from luna.memory.embedding import model_cache as cache


def _publish(folder: Path) -> Path:
    key = cache.cache_key("all-MiniLM-L6-v2", 384)
    return cache.publish(cache.new_tmp_dir(folder, key), folder, key, cache.MANIFEST, {})


def test_doctor_says_where_the_prepared_model_is_and_whether_ready(
    tmp_path: Path, luna_config: Callable[..., Config]
) -> None:
    shared = tmp_path / "machine" / "embedding-models"
    cfg = luna_config({"memory": {"model_cache": str(shared)}})
    missing = prepared_model_result(cfg)
    assert missing.ok is False and not missing.essential
    assert f"not prepared: {shared}" in missing.detail and "luna memory prepare" in missing.fix
    with export_job.holding_lock(shared, "all-MiniLM-L6-v2", 384):
        busy = prepared_model_result(cfg)
    assert busy.ok is False and "being prepared now" in busy.detail
    legacy = _publish(cfg.data_dir / "models")  # an older Luna's copy in the data folder
    kept = prepared_model_result(cfg)
    assert kept.ok and str(legacy) in kept.detail and "data folder's own copy" in kept.detail
    entry = _publish(shared)
    ready = prepared_model_result(cfg)
    assert ready.ok and f"ready in {entry}" in ready.detail and "machine's cache" in ready.detail
    torch = luna_config({"memory": {"embedding_backend": "torch"}})
    assert prepared_model_result(torch).ok is None  # skipped: nothing to prepare
