"""Property tests of the layouts over random sizes: a checkpoint assembled head by head with explicit
loops (the slow reference, written from each modeling file's split) must give back exactly the
per-head factors it was built from. The gold tests prove the layouts on fixed tiny models; these
sweep head counts, head dims and widths, GQA and MQA included.
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.families import get_family
from attnscope.sources import DictSource

SIZES = st.fixed_dictionaries({"n_kv": st.integers(1, 4), "rep": st.integers(1, 3), "e": st.integers(1, 5),
                               "d": st.integers(1, 7), "seed": st.integers(0, 2**16)})


def _factors(n: int, d: int, e: int, rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal((n, d, e)).astype(np.float32)  # [n, d, e], input-by-output


def _check(cfg: dict, tensors: dict, q: np.ndarray, k: np.ndarray) -> None:
    (f,) = get_family(cfg).iter_factors(DictSource({n: torch.from_numpy(t) for n, t in tensors.items()}, cfg))
    np.testing.assert_array_equal(f.q, q)
    np.testing.assert_array_equal(f.k, k)


def _hf(model_type: str, n_q: int, n_kv: int, d: int, e: int, **extra) -> dict:
    return {"model_type": model_type, "num_hidden_layers": 1, "num_attention_heads": n_q, "num_key_value_heads": n_kv,
            "hidden_size": d, "head_dim": e, **extra}


@settings(max_examples=25, deadline=None)
@given(SIZES)
def test_linear_gqa(s: dict) -> None:
    """LLaMA: q_proj rows h*e.. = Q[h]^T, k_proj rows g*e.. = K[g]^T."""
    rng = np.random.default_rng(s["seed"])
    n_kv, n_q, e, d = s["n_kv"], s["n_kv"] * s["rep"], s["e"], s["d"]
    q, k = _factors(n_q, d, e, rng), _factors(n_kv, d, e, rng)
    wq, wk = np.zeros((n_q * e, d), np.float32), np.zeros((n_kv * e, d), np.float32)
    for h in range(n_q):
        wq[h * e:(h + 1) * e] = q[h].T
    for g in range(n_kv):
        wk[g * e:(g + 1) * e] = k[g].T
    _check(_hf("llama", n_q, n_kv, d, e), {"model.layers.0.self_attn.q_proj.weight": wq,
                                          "model.layers.0.self_attn.k_proj.weight": wk}, q, k)


@settings(max_examples=25, deadline=None)
@given(SIZES)
def test_fused_equal_thirds(s: dict) -> None:
    """GPT-2 Conv1D columns [q|k|v]; NeoX rows per head (h, part); ModernBERT rows (part, h)."""
    rng = np.random.default_rng(s["seed"])
    n, e = s["n_kv"] * s["rep"], s["e"]
    d = n * e  # these families derive the head dim from the width
    parts = [_factors(n, d, e, rng) for _ in range(3)]  # q, k, v
    conv = np.zeros((d, 3 * n * e), np.float32)
    neox = np.zeros((3 * n * e, d), np.float32)
    modern = np.zeros((3 * n * e, d), np.float32)
    for p in range(3):
        for h in range(n):
            conv[:, (p * n + h) * e:(p * n + h + 1) * e] = parts[p][h]
            neox[(h * 3 + p) * e:(h * 3 + p + 1) * e] = parts[p][h].T
            modern[(p * n + h) * e:(p * n + h + 1) * e] = parts[p][h].T
    gpt2 = {"model_type": "gpt2", "n_layer": 1, "n_head": n, "n_embd": d}
    _check(gpt2, {"h.0.attn.c_attn.weight": conv}, parts[0], parts[1])
    hf = {"num_hidden_layers": 1, "num_attention_heads": n, "hidden_size": d}
    _check({"model_type": "gpt_neox", **hf}, {"gpt_neox.layers.0.attention.query_key_value.weight": neox},
           parts[0], parts[1])
    _check({"model_type": "modernbert", **hf}, {"model.layers.0.attn.Wqkv.weight": modern}, parts[0], parts[1])


@settings(max_examples=25, deadline=None)
@given(SIZES)
def test_fused_unequal_blocks(s: dict) -> None:
    """Phi-3 rows [q (n_q e) | k (n_kv e) | v (n_kv e)], any head dim (GQA and MQA)."""
    rng = np.random.default_rng(s["seed"])
    n_kv, rep, e, d = s["n_kv"], s["rep"], s["e"], s["d"]
    n_q = n_kv * rep
    q, k, v = _factors(n_q, d, e, rng), _factors(n_kv, d, e, rng), _factors(n_kv, d, e, rng)
    phi3 = np.zeros(((n_q + 2 * n_kv) * e, d), np.float32)
    for h in range(n_q):
        phi3[h * e:(h + 1) * e] = q[h].T
    for g in range(n_kv):
        phi3[(n_q + g) * e:(n_q + g + 1) * e] = k[g].T
        phi3[(n_q + n_kv + g) * e:(n_q + n_kv + g + 1) * e] = v[g].T
    _check(_hf("phi3", n_q, n_kv, d, e), {"model.layers.0.self_attn.qkv_proj.weight": phi3}, q, k)


@settings(max_examples=25, deadline=None)
@given(SIZES)
def test_falcon_grouped_layout(s: dict) -> None:
    """Falcon new architecture: rows per kv group [q_1 .. q_r | k | v] (head dim = d / n_q)."""
    rng = np.random.default_rng(s["seed"])
    n_kv, rep, e = s["n_kv"], s["rep"], s["e"]
    n_q = n_kv * rep
    d = n_q * e
    q, k = _factors(n_q, d, e, rng), _factors(n_kv, d, e, rng)
    w = rng.standard_normal(((n_q + 2 * n_kv) * e, d)).astype(np.float32)  # v rows: anything
    for h in range(n_q):
        g, j = divmod(h, rep)
        w[(g * (rep + 2) + j) * e:(g * (rep + 2) + j + 1) * e] = q[h].T
    for g in range(n_kv):
        w[(g * (rep + 2) + rep) * e:(g * (rep + 2) + rep + 1) * e] = k[g].T
    cfg = {"model_type": "falcon", "num_hidden_layers": 1, "num_attention_heads": n_q, "num_kv_heads": n_kv,
           "hidden_size": d, "new_decoder_architecture": True}
    _check(cfg, {"transformer.h.0.self_attention.query_key_value.weight": w}, q, k)
