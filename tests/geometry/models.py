"""Tiny random Hugging Face models written to disk in every layout a source must read (no download)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

TINY_LLAMA = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2)  # fmt: skip
TINY_BERT = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=3,
                 num_attention_heads=4, max_position_embeddings=64)  # fmt: skip


def llama_model(seed: int = 0, **overrides):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**{**TINY_LLAMA, **overrides}))


def bert_model(seed: int = 0):
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(seed)
    return BertModel(BertConfig(**TINY_BERT))


def write_model(model, path: Path, layout: str) -> Path:
    """layout: "single" (model.safetensors), "sharded" (index + shards), "bin" (pytorch_model.bin)."""
    import torch

    path.mkdir(parents=True, exist_ok=True)
    if layout == "single":
        model.save_pretrained(path)
    elif layout == "sharded":
        model.save_pretrained(path, max_shard_size="20KB")
        assert (path / "model.safetensors.index.json").is_file()
    elif layout == "bin":
        model.config.save_pretrained(path)
        torch.save({k: v.contiguous() for k, v in model.state_dict().items()}, path / "pytorch_model.bin")
    else:
        raise ValueError(layout)
    return path


def llama_reference(model) -> dict[tuple[int, int | None], np.ndarray]:
    """Explicit M_h (float64) per (layer, head) and M_L per (layer, None), straight from the torch weights.

    Written independently of attnscope: nn.Linear weights [n*e, d] -> W = weight.T sliced per head,
    query head h paired with key head h // (n_q / n_kv).
    """
    cfg = model.config
    n_q, n_kv = cfg.num_attention_heads, cfg.num_key_value_heads
    e = cfg.hidden_size // n_q
    out: dict[tuple[int, int | None], np.ndarray] = {}
    for i, layer in enumerate(model.model.layers):
        wq = layer.self_attn.q_proj.weight.detach().double().numpy().T  # [d, n_q e]
        wk = layer.self_attn.k_proj.weight.detach().double().numpy().T  # [d, n_kv e]
        total = 0.0
        for h in range(n_q):
            g = h // (n_q // n_kv)
            m = wq[:, h * e : (h + 1) * e] @ wk[:, g * e : (g + 1) * e].T
            out[(i, h)] = m
            total = total + m
        out[(i, None)] = total
    return out


def corrupt_copy(src: Path, dst: Path) -> Path:
    import shutil

    shutil.copytree(src, dst)
    return dst


def index_weight_map(path: Path) -> dict[str, str]:
    return json.loads((path / "model.safetensors.index.json").read_text())["weight_map"]
