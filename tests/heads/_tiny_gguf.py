"""Test helper: a whole tiny random Hugging Face llama written as a GGUF file (weights AND tokenizer).

Independent of the readers under test: the ``gguf`` package's writer, llama.cpp's RoPE row permutation
of q/k (as its converter applies it) and a sentencepiece-style ("llama") vocabulary of byte tokens, so
transformers' GGUF loader rebuilds a fast tokenizer from the file. The same weights are also saved as
an HF directory with an equivalent tokenizer, so maps from the two can be compared.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SPECIALS = ["<unk>", "<s>", "</s>"]
VOCAB = SPECIALS + [f"<0x{b:02X}>" for b in range(256)]  # 259 tokens: specials + byte fallback


def tiny_llama_model(n_layers: int = 2, d: int = 32, n_heads: int = 4, n_kv: int = 2, seed: int = 0):
    """A tiny random LlamaForCausalLM whose vocabulary matches :data:`VOCAB`, with distinct heads."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(VOCAB), hidden_size=d, intermediate_size=2 * d, num_hidden_layers=n_layers,
                      num_attention_heads=n_heads, num_key_value_heads=n_kv, max_position_embeddings=256,
                      bos_token_id=1, eos_token_id=2, tie_word_embeddings=False, rms_norm_eps=1e-5)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # sharper, distinct heads than the 0.02 init so that the maps differ visibly
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.normal_(0, 0.5)
            layer.self_attn.k_proj.weight.normal_(0, 0.5)
    return model


def _permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's q/k row permutation (within each head, the two rotary halves interleaved)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_llama_gguf_model(path, model) -> Path:
    """Every tensor of ``model`` plus a byte-level llama vocabulary into one GGUF file (F32)."""
    import gguf

    cfg = model.config
    h, g = cfg.num_attention_heads, cfg.num_key_value_heads
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-gguf-llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(h)
    w.add_head_count_kv(g)
    w.add_rope_dimension_count(cfg.hidden_size // h)
    w.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]) if getattr(cfg, "rope_parameters", None) else 10000.0)
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(len(VOCAB))
    w.add_tokenizer_model("llama")
    w.add_token_list(VOCAB)
    w.add_token_scores([0.0] * len(VOCAB))
    w.add_token_types([2, 3, 3] + [6] * 256)  # unknown, control x2, byte
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    names = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    per_layer = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
                 "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                 "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                 "mlp.down_proj": "ffn_down"}
    for i in range(cfg.num_hidden_layers):
        for hf, gg in per_layer.items():
            names[f"model.layers.{i}.{hf}.weight"] = f"blk.{i}.{gg}.weight"
    for hf, gg in names.items():
        arr = sd[hf]
        if gg.endswith("attn_q.weight"):
            arr = _permute(arr, h)
        elif gg.endswith("attn_k.weight"):
            arr = _permute(arr, g)
        w.add_tensor(gg, np.ascontiguousarray(arr, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


#: the modules running a GGUF llama needs (transformers and the gguf extra)
GGUF_RUNTIME = ("transformers", "accelerate", "gguf")


def missing_gguf_runtime() -> bool:
    """Whether a test that runs a GGUF llama must be skipped here."""
    import importlib.util

    return any(importlib.util.find_spec(n) is None for n in GGUF_RUNTIME)


def tiny_llama_gguf(folder: Path) -> Path:
    """The tests' 2-layer GGUF llama (4 heads, 2 kv heads, d = 32) written into ``folder``."""
    return write_llama_gguf_model(Path(folder) / "tiny.gguf", tiny_llama_model(n_layers=2, d=32, n_heads=4, n_kv=2))
