"""Text to vectors: the embedding model, the process it runs in, its ONNX export and cache.

The embedder (ONNX or torch), the worker process and its client (encoder), the export and its
cache, where a model's files are, and the indexer that embeds what the session log stored.
May import luna.memory.storage (the indexer writes vectors); never recall or the facade.
"""
