"""Run an exported embedding model with ONNX Runtime and ``tokenizers``: no torch involved.

Why: on a small CPU box embedding is what limits memory ingest, and torch is what makes the
embedding process big and slow to start. The exported transformer (see
:mod:`luna.memory.embedding.onnx_export`) runs about twice as fast on ONNX Runtime, and loading it
needs only onnxruntime, tokenizers and numpy (about 50 MB and a quarter of a second).

Invariants:
- Tokenization is the model's own fast tokenizer (``tokenizer.json``), with the model's
  ``max_seq_length``, lower-casing and padding, and the text stripped first, exactly as
  sentence-transformers prepares it: same token ids, so the same vectors (cosine ≥ 0.9999 to
  torch's, checked when the model is exported).
- Batches hold at most ``batch_size`` texts of similar length and ``TOKEN_BUDGET`` padded tokens:
  activations (which grow with the square of the length) stay small, and so does the process.
- The weights are external data that ONNX Runtime maps from the file: pages of the embedding
  table no text ever touches are never read into memory.
- Returns pooled float32 vectors, not normalized: the caller post-processes every backend the
  same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

TOKEN_BUDGET = 1024  # padded tokens per batch: 4 texts of 256 tokens, 16 of 64

MODEL_FILE = "model.onnx"
TOKENIZER_FILE = "tokenizer.json"


class OnnxEncoder:
    """Tokenize, run the exported transformer, pool."""

    def __init__(self, session: Any, tokenizer: Any, manifest: dict[str, Any]) -> None:
        self.session = session
        self.tokenizer = tokenizer
        self.manifest = manifest
        self.pooling = str(manifest["pooling"])
        self.input_names = [str(n) for n in manifest["input_names"]]
        self.lower_case = bool(manifest.get("do_lower_case"))
        self.pad_id = int(manifest.get("pad_id") or 0)
        self.pad_type_id = int(manifest.get("pad_type_id") or 0)

    @classmethod
    def load(cls, folder: Path, manifest: dict[str, Any] | None = None) -> OnnxEncoder:
        """The encoder stored in an export folder (its ``manifest.json`` unless given)."""
        import onnxruntime as ort
        from tokenizers import Tokenizer

        if manifest is None:
            manifest = json.loads((folder / "manifest.json").read_text())
        tokenizer = Tokenizer.from_file(str(folder / TOKENIZER_FILE))
        tokenizer.no_padding()  # padding is done per batch below
        tokenizer.enable_truncation(int(manifest["max_length"]))
        options = ort.SessionOptions()
        options.log_severity_level = 3
        # Idle threads that spin steal the CPU of a small, busy box: measured on two loaded
        # cores, a query 11.5 -> 5.4 ms and a batch 5.8 -> 3.1 ms per text without spinning.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        # One thread per call: a short query is faster alone (3.2 vs 3.4 ms), and a caller
        # that wants two cores splits its batch (the embedding process does), so the priority
        # of the calling thread is the priority of the work.
        options.intra_op_num_threads = 1
        session = ort.InferenceSession(
            str(folder / MODEL_FILE), options, providers=["CPUExecutionProvider"]
        )
        return cls(session, tokenizer, manifest)

    def _batches(self, lengths: list[int], batch_size: int) -> list[list[int]]:
        order = sorted(range(len(lengths)), key=lengths.__getitem__)
        batches: list[list[int]] = []
        for i in order:  # ascending length: the last text added is the longest of its batch
            batch = batches[-1] if batches else []
            if batch and len(batch) < batch_size and (len(batch) + 1) * lengths[i] <= TOKEN_BUDGET:
                batch.append(i)
            else:
                batches.append([i])
        return batches

    def encode(self, texts: list[str], batch_size: int) -> np.ndarray:
        """Pooled vectors, one row per text, in the order given."""
        prepared = [t.strip() for t in texts]
        if self.lower_case:
            prepared = [t.lower() for t in prepared]
        encodings = self.tokenizer.encode_batch(prepared) if prepared else []
        dim = 0
        out: np.ndarray | None = None
        for batch in self._batches([len(e.ids) for e in encodings], batch_size):
            width = max(len(encodings[i].ids) for i in batch)
            ids = np.full((len(batch), width), self.pad_id, dtype=np.int64)
            mask = np.zeros((len(batch), width), dtype=np.int64)
            types = np.full((len(batch), width), self.pad_type_id, dtype=np.int64)
            for row, i in enumerate(batch):
                enc = encodings[i]
                n = len(enc.ids)
                ids[row, :n] = enc.ids
                mask[row, :n] = enc.attention_mask
                types[row, :n] = enc.type_ids
            inputs = {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}
            feeds = {name: inputs[name] for name in self.input_names}
            hidden = self.session.run(None, feeds)[0]
            if self.pooling == "cls":
                pooled = hidden[:, 0]
            else:
                weights = mask[..., None].astype(np.float32)
                pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            if out is None:
                dim = pooled.shape[1]
                out = np.empty((len(texts), dim), dtype=np.float32)
            out[batch] = pooled
        return out if out is not None else np.empty((0, dim), dtype=np.float32)
