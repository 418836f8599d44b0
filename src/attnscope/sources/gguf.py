"""GGUF files (llama.cpp / Ollama): metadata as an HF-style config, tensors read and dequantised one at a time.

The header and tensor index are read by :func:`attnscope.sources.gguf_header.read_gguf_header`,
which checks every count, length and offset against the file before using it and skips what a run
does not need (the tokenizer's vocabulary, merges and scores). Tensor *data* is read with ``os.pread``
at the recorded offset, so the resident set stays at one tensor even when a 70B model is streamed
layer by layer. Quantised tensors (Q8_0, Q4_K, ...) are dequantised with ``gguf.quants.dequantize``.

ggml lists dimensions innermost first (``ne0`` = input dim); tensors come back in numpy / torch
order, i.e. ``[out, in]`` like ``nn.Linear.weight``.

The config exposes ``model_type = "gguf:<arch>"`` and Hugging Face keys (``num_attention_heads``,
``num_key_value_heads``, ``hidden_size``, ``num_hidden_layers``, ``head_dim`` when the file states
``key_length``), plus the raw metadata under ``gguf_metadata`` (scalars and short arrays; no tokenizer keys).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attnscope.errors import FormatError, InputError

from .base import WeightSource, metadata_count
from .gguf_header import GGUF_MAGIC, TensorInfo, read_gguf_header

if TYPE_CHECKING:  # pragma: no cover
    import torch


class GGUFSource(WeightSource):
    """One ``.gguf`` file."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.name = str(path)
        header = read_gguf_header(self.path)
        self._tensors: dict[str, TensorInfo] = header.tensors
        self._meta = header.metadata
        self._config = self._build_config()

    # -- WeightSource -------------------------------------------------------------------------
    @classmethod
    def detect(cls, spec: str) -> bool:
        p = Path(spec)
        if p.is_file():
            if p.suffix.lower() == ".gguf":
                return True
            try:
                with open(p, "rb") as fh:
                    return fh.read(4) == GGUF_MAGIC
            except OSError:
                return False
        return False

    @classmethod
    def open(cls, spec: str, **options: Any) -> "GGUFSource":
        p = Path(spec)
        if not p.is_file():
            raise InputError(f"{spec}: no such GGUF file")
        return cls(p)

    @property
    def config(self) -> dict[str, Any]:
        return self._config

    def keys(self) -> list[str]:
        return list(self._tensors)

    def has(self, name: str) -> bool:
        return name in self._tensors

    def get(self, name: str) -> "torch.Tensor":
        import torch

        return torch.from_numpy(self.get_numpy(name))

    def get_numpy(self, name: str) -> np.ndarray:
        """One tensor as float32 numpy in ``[out, in]`` order (dequantised), read with pread."""
        from gguf import GGMLQuantizationType
        from gguf.quants import dequantize

        t = self._tensors.get(name)
        if t is None:
            raise FormatError(f"{self.name}: no tensor named {name!r}")
        shape = tuple(reversed(t.shape))  # numpy order
        qtype = GGMLQuantizationType(t.ggml_type)
        n_bytes = t.n_bytes
        raw = np.frombuffer(_pread(self.path, t.offset, n_bytes, self.name, name), dtype=np.uint8)
        if qtype == GGMLQuantizationType.F32:
            out = raw.view(np.float32).reshape(shape)
        elif qtype == GGMLQuantizationType.F16:
            out = raw.view(np.float16).reshape(shape).astype(np.float32)
        elif qtype == GGMLQuantizationType.BF16:  # widen in place of a generic dequantisation pass
            out = np.left_shift(raw.view("<u2").astype(np.uint32), 16).view(np.float32).reshape(shape)
        else:
            rows = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
            try:
                out = dequantize(raw.reshape(rows, n_bytes // rows), qtype).reshape(shape)
            except NotImplementedError as exc:
                raise FormatError(f"{self.name}: cannot dequantise {name} of type {qtype.name}: {exc}") from None
        return np.ascontiguousarray(out, dtype=np.float32)

    def tensor_type(self, name: str) -> str:
        """The ggml type name of a tensor (F32, F16, BF16, Q8_0, Q4_K, ...)."""
        from gguf import GGMLQuantizationType

        return GGMLQuantizationType(self._tensors[name].ggml_type).name

    def close(self) -> None:
        pass  # nothing held open: every read opens the file

    # -- config ---------------------------------------------------------------------------------
    def _build_config(self) -> dict[str, Any]:
        meta = dict(self._meta)
        arch = meta.get("general.architecture")
        if not isinstance(arch, str):
            raise FormatError(f"{self.name}: GGUF file has no general.architecture")

        def need(key: str) -> Any:
            full = f"{arch}.{key}"
            if full not in meta:
                raise FormatError(f"{self.name}: GGUF metadata lacks {full}")
            return meta[full]

        def count(key: str, value: Any) -> int:
            return metadata_count(value, f"GGUF metadata {arch}.{key}", self.name)

        n_heads = need("attention.head_count")
        n_kv = meta.get(f"{arch}.attention.head_count_kv", n_heads)
        if isinstance(n_heads, list) or isinstance(n_kv, list):  # per-layer counts (rare)
            heads_l, kv_l = (v if isinstance(v, list) else [v] for v in (n_heads, n_kv))
            if not heads_l or not kv_l:
                raise FormatError(f"{self.name}: GGUF metadata holds an empty per-layer head count list")
            heads_l = [count("attention.head_count", v) for v in heads_l]
            kv_l = [count("attention.head_count_kv", v) for v in kv_l]
            if len(set(heads_l)) > 1 or len(set(kv_l)) > 1:
                raise FormatError(f"{self.name}: per-layer head counts are not supported")
            n_heads, n_kv = heads_l[0], kv_l[0]
        n_heads = count("attention.head_count", n_heads)
        n_kv = count("attention.head_count_kv", n_kv)
        if n_heads % n_kv:
            raise FormatError(f"{self.name}: GGUF metadata says {n_heads} query heads but {n_kv} key/value heads "
                              "(the query heads must be a multiple)")
        cfg: dict[str, Any] = {
            "model_type": f"gguf:{arch}",
            "architecture": arch,
            "num_attention_heads": n_heads,
            "num_key_value_heads": n_kv,
            "hidden_size": count("embedding_length", need("embedding_length")),
            "num_hidden_layers": count("block_count", need("block_count")),
            "gguf_metadata": meta,
        }
        key_length = meta.get(f"{arch}.attention.key_length")
        if key_length is not None:
            cfg["head_dim"] = count("attention.key_length", key_length)
        if "general.name" in meta:
            cfg["name"] = meta["general.name"]
        return cfg


def _pread(path: Path, offset: int, n: int, label: str, tensor: str) -> bytearray:
    """Read exactly ``n`` bytes at ``offset`` (positioned reads, no memory map)."""
    buf = bytearray(n)
    view = memoryview(buf)
    fd = os.open(path, os.O_RDONLY)
    try:
        got = 0
        while got < n:
            chunk = os.preadv(fd, [view[got:]], offset + got)
            if chunk == 0:
                raise FormatError(f"{label}: truncated tensor {tensor} ({got} of {n} bytes)")
            got += chunk
    finally:
        os.close(fd)
    return buf
