"""Test helpers: tiny random Hugging Face models written to disk as GGUF files and CTranslate2 directories.

Our own small writers (independent of the readers under test): GGUF through the ``gguf`` package's
writer with llama.cpp's RoPE row permutation applied as its converter does; CTranslate2 through a
hand-written ``model.bin`` encoder following the documented binary layout (version 6).
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

# ----------------------------------------------------------------------------------------- GGUF


def llama_rope_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf row permutation for q/k (within each head, halves interleaved)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def tiny_llama(n_layers=2, d=64, n_heads=4, n_kv=2, seed=0):
    """A tiny random HF LlamaForCausalLM (GQA) and its config."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=64, hidden_size=d, intermediate_size=2 * d, num_hidden_layers=n_layers,
                      num_attention_heads=n_heads, num_key_value_heads=n_kv, max_position_embeddings=64)
    model = LlamaForCausalLM(cfg).eval()
    # random init has q/k std 0.02 everywhere: give heads distinct structure so the test can fail
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            layer.self_attn.q_proj.weight.normal_(0, 1.0)
            layer.self_attn.k_proj.weight.normal_(0, 1.0)
            layer.self_attn.k_proj.weight[:, : d // 4] *= 3.0 + i  # a few dominant key columns
    return model, cfg


def write_llama_gguf(path, model, cfg, qtype: str = "F32", permute: bool = True, arch: str = "llama",
                     fused: bool = False) -> Path:
    """Write the q/k/v projections of an HF llama to a GGUF file (``qtype``: F32, F16, BF16, Q8_0, ...).

    ``fused=True`` writes one ``attn_qkv`` tensor with rows [q | k | v] (the Phi-3 layout, no RoPE permutation).
    """
    import gguf

    path = Path(path)
    w = gguf.GGUFWriter(str(path), arch)
    h, g = cfg.num_attention_heads, cfg.num_key_value_heads
    w.add_block_count(cfg.num_hidden_layers)
    w.add_embedding_length(cfg.hidden_size)
    w.add_head_count(h)
    w.add_head_count_kv(g)
    w.add_context_length(cfg.max_position_embeddings)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_name("tiny-llama-test")
    qt = gguf.GGMLQuantizationType[qtype]
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    for i in range(cfg.num_hidden_layers):
        p = f"model.layers.{i}.self_attn"
        tensors = {
            "attn_q": llama_rope_permute(sd[f"{p}.q_proj.weight"], h) if permute else sd[f"{p}.q_proj.weight"],
            "attn_k": llama_rope_permute(sd[f"{p}.k_proj.weight"], g) if permute else sd[f"{p}.k_proj.weight"],
            "attn_v": sd[f"{p}.v_proj.weight"],
        }
        if fused:
            tensors = {"attn_qkv": np.concatenate([sd[f"{p}.{x}_proj.weight"] for x in "qkv"], axis=0)}
        for name, arr in tensors.items():
            arr = np.ascontiguousarray(arr, dtype=np.float32)
            if qt == gguf.GGMLQuantizationType.F32:
                w.add_tensor(f"blk.{i}.{name}.weight", arr)
            elif qt == gguf.GGMLQuantizationType.F16:
                w.add_tensor(f"blk.{i}.{name}.weight", arr.astype(np.float16))
            else:
                w.add_tensor(f"blk.{i}.{name}.weight", gguf.quants.quantize(arr, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


# ---------------------------------------------------------------------------------- CTranslate2

_CT2_DTYPE_IDS = {np.dtype("float32"): 0, np.dtype("int8"): 1, np.dtype("int16"): 2, np.dtype("int32"): 3,
                  np.dtype("float16"): 4}


class _BF16(np.ndarray):
    """Marks a uint16 array as bfloat16 bit patterns for :func:`write_ct2`."""

    def __new__(cls, bits: np.ndarray) -> "_BF16":
        return np.asarray(bits, dtype=np.uint16).view(cls)


def _ct2_string(s: str) -> bytes:
    raw = s.encode() + b"\0"
    return struct.pack("<H", len(raw)) + raw


def write_ct2(directory, spec: str, variables: dict[str, np.ndarray], aliases: dict[str, str] | None = None,
              config: dict | None = None, version: int = 6, revision: int = 3) -> Path:
    """Write a CTranslate2 ``model.bin`` (+ ``config.json``) from named numpy arrays."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    out = bytearray(struct.pack("<I", version) + _ct2_string(spec) + struct.pack("<I", revision))
    out += struct.pack("<I", len(variables))
    for name, arr in sorted(variables.items()):
        arr = np.ascontiguousarray(arr)
        out += _ct2_string(name) + struct.pack("<B", arr.ndim)
        out += b"".join(struct.pack("<I", s) for s in arr.shape)
        data = arr.astype(arr.dtype.newbyteorder("<")).tobytes()
        dtype_id = 5 if isinstance(variables[name], _BF16) else _CT2_DTYPE_IDS[arr.dtype]
        out += struct.pack("<B", dtype_id) + struct.pack("<I", len(data)) + data
    aliases = aliases or {}
    out += struct.pack("<I", len(aliases))
    for a, t in aliases.items():
        out += _ct2_string(a) + _ct2_string(t)
    (directory / "model.bin").write_bytes(bytes(out))
    (directory / "config.json").write_text(json.dumps(config or {"suppress_ids": []}))
    return directory


def tiny_whisper(d=64, heads=4, layers=2, seed=0):
    """A tiny random HF WhisperModel and its config."""
    import torch
    from transformers import WhisperConfig, WhisperModel

    torch.manual_seed(seed)
    cfg = WhisperConfig(vocab_size=64, d_model=d, encoder_layers=layers, decoder_layers=layers,
                        encoder_attention_heads=heads, decoder_attention_heads=heads, encoder_ffn_dim=2 * d,
                        decoder_ffn_dim=2 * d, num_mel_bins=8, max_source_positions=16, max_target_positions=16,
                        pad_token_id=1, bos_token_id=2, eos_token_id=2, decoder_start_token_id=3,
                        suppress_tokens=[], begin_suppress_tokens=[])
    model = WhisperModel(cfg).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("q_proj.weight", "k_proj.weight")):
                p.normal_(0, 1.0)
        for i, layer in enumerate(model.decoder.layers):  # decoders: a few dominant key columns
            layer.self_attn.k_proj.weight[:, : d // 4] *= 4.0 + i
    return model, cfg


def _quantize_int8(w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """CTranslate2's int8 scheme: per-row scale = 127 / max|w|, q = round(w * scale)."""
    scale = (127.0 / np.maximum(np.abs(w).max(axis=1), 1e-12)).astype(np.float32)
    return np.round(w * scale[:, None]).astype(np.int8), scale


def write_whisper_ct2(directory, model, cfg, dtype: str = "float16") -> Path:
    """Write the attention projections of an HF WhisperModel in CTranslate2's fused Whisper layout."""
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    variables: dict[str, np.ndarray] = {
        "encoder/num_heads": np.array(cfg.encoder_attention_heads, dtype=np.int16),
        "decoder/num_heads": np.array(cfg.decoder_attention_heads, dtype=np.int16),
        "decoder/embeddings/weight": sd["decoder.embed_tokens.weight"].astype(np.float16),
    }

    def put(name: str, w: np.ndarray) -> None:
        if dtype == "bfloat16":  # stored as raw bf16 bit patterns (uint16), CTranslate2 dtype id 5
            variables[name] = _BF16((w.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))
        elif dtype == "int8":
            q, scale = _quantize_int8(w)
            variables[name], variables[f"{name}_scale"] = q, scale
        else:
            variables[name] = w.astype(dtype)

    for stack in ("encoder", "decoder"):
        for i in range(getattr(cfg, f"{stack}_layers")):
            p = f"{stack}.layers.{i}.self_attn"
            fused = np.concatenate([sd[f"{p}.{x}_proj.weight"] for x in "qkv"], axis=0)
            put(f"{stack}/layer_{i}/self_attention/linear_0/weight", fused)
            variables[f"{stack}/layer_{i}/self_attention/linear_1/weight"] = sd[f"{p}.out_proj.weight"].astype(np.float16)
            if stack == "decoder":
                c = f"decoder.layers.{i}.encoder_attn"
                put(f"decoder/layer_{i}/attention/linear_0/weight", sd[f"{c}.q_proj.weight"])
                put(f"decoder/layer_{i}/attention/linear_1/weight",
                    np.concatenate([sd[f"{c}.k_proj.weight"], sd[f"{c}.v_proj.weight"]], axis=0))
    return write_ct2(directory, "WhisperSpec", variables, aliases={"decoder/projection/weight": "decoder/embeddings/weight"})


# ------------------------------------------------------------------------------- explicit reference


def explicit_head_matrices(wq: np.ndarray, wk: np.ndarray, n_q: int, n_kv: int) -> np.ndarray:
    """Slow reference: M_h = W_q^(h) W_k^(h // (n_q/n_kv))^T from nn.Linear weights ``[n e, d]`` -> [h, d, d_k]."""
    e = wq.shape[0] // n_q
    out = []
    for h in range(n_q):
        g = h // (n_q // n_kv)
        qh = wq[h * e : (h + 1) * e].T.astype(np.float64)  # [d, e]
        kg = wk[g * e : (g + 1) * e].T.astype(np.float64)  # [d_k, e]
        out.append(qh @ kg.T)
    return np.stack(out)


def factor_head_matrices(q: np.ndarray, k: np.ndarray) -> np.ndarray:
    """M_h from factors Q [h, d, e], K [g, d, e] using the package's kv mapping."""
    from attnscope.families import kv_head_index

    idx = kv_head_index(q.shape[0], k.shape[0])
    return np.einsum("hde,hfe->hdf", q.astype(np.float64), k[idx].astype(np.float64))
