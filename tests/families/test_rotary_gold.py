"""Gold test of the rotary layouts: ``x_m Q G(m - n) K^T x_n^T`` equals each model's own rotated q . k.

Tiny random models of every rotary family (real Hugging Face config classes, no download) run at
scattered positions; the attention interface hands over the model's own rotated queries and keys
(before scaling and softmax). Our side: the factors of the saved checkpoint and the rotary layout
read from its config (:func:`attnscope.families.rope.rotary_layout`), for every (m, n) pair. GGUF:
the same HF llama written with llama.cpp's q/k row permutation (arch llama: adjacent pairs) and
without it (arch qwen2: half-split) must both reproduce the HF model's logits.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attnscope.families import get_family
from attnscope.families.rope import ADJACENT, HALF_SPLIT, RotaryLayout, rotary_layout
from attnscope.geometry.rotary import rotation_matrix
from attnscope.sources import open_source

from .gold import Case, build, model_logits, rms_scales, run, text_inputs

transformers = pytest.importorskip("transformers")

LLAMA_ATTN = {r"layers\.(\d+)\.self_attn": "decoder"}
POSITIONS = torch.tensor([0, 1, 5, 17, 40, 100, 255])  # offsets up to 255, both signs
TINY = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37, vocab_size=99)


def positioned(cfg) -> dict[str, torch.Tensor]:
    inputs = text_inputs(cfg, t=len(POSITIONS))
    inputs["position_ids"] = POSITIONS[None].expand(2, -1).clone()
    return inputs


def _v4_rope(kw: dict) -> dict:
    """transformers 4.x spells transformers 5's ``rope_parameters`` as ``rope_theta`` + ``rope_scaling``."""
    rp = kw.get("rope_parameters")
    if int(transformers.__version__.split(".")[0]) >= 5 or not isinstance(rp, dict):
        return kw
    out = {k: v for k, v in kw.items() if k != "rope_parameters"}
    out["rope_theta"] = rp.get("rope_theta", 10000.0)
    scaling = {k: v for k, v in rp.items() if k != "rope_theta"}
    if scaling.get("rope_type") == "longrope":  # 4.x's Phi-3: exactly type, short_factor, long_factor
        out["original_max_position_embeddings"] = scaling.pop("original_max_position_embeddings", None)
        out["rope_scaling"] = {"type": "longrope", "short_factor": scaling["short_factor"],
                               "long_factor": scaling["long_factor"]}
    elif scaling.get("rope_type", "default") != "default":
        out["rope_scaling"] = {**scaling, "type": scaling["rope_type"]}  # 4.x validators read either key
    return out


def _config(cls: str, **kw):
    return getattr(transformers, cls)(**_v4_rope({**TINY, **kw}))


def _case(cls: str, model: str | None = None, attn=LLAMA_ATTN, q_in="q_proj", k_in="k_proj", qk_norm="",
          tag: str = "", **kw) -> Case:  # fmt: skip
    config = lambda: _config(cls, **kw)  # noqa: E731
    return Case(f"{cls}{tag}", config, model or cls.replace("Config", "Model"), attn, q_in, k_in,
                inputs=positioned, qk_norm=qk_norm)


_LLAMA3 = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
               original_max_position_embeddings=64, rope_theta=10000.0)  # fmt: skip
_YARN = dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=64, rope_theta=10000.0)
CASES = [
    _case("LlamaConfig", num_key_value_heads=2),
    _case("LlamaConfig", tag="-linear", num_key_value_heads=2, rope_parameters=dict(rope_type="linear", factor=4.0,
                                                                                 rope_theta=500.0)),
    _case("LlamaConfig", tag="-dynamic", num_key_value_heads=2, max_position_embeddings=512,
          rope_parameters=dict(rope_type="dynamic", factor=2.0, rope_theta=10000.0)),
    _case("LlamaConfig", tag="-llama3", num_key_value_heads=2, rope_parameters=_LLAMA3),
    _case("LlamaConfig", tag="-yarn", num_key_value_heads=2, rope_parameters=_YARN),
    _case("MistralConfig", num_key_value_heads=2),
    _case("Qwen2Config", num_key_value_heads=2),
    _case("GemmaConfig", num_key_value_heads=1, head_dim=8),
    _case("Gemma2Config", num_key_value_heads=2, head_dim=8),
    _case("Gemma3TextConfig", num_key_value_heads=1, head_dim=8, qk_norm="head",
          layer_types=["sliding_attention", "full_attention"], sliding_window=4),
    _case("Qwen3Config", num_key_value_heads=2, head_dim=8, qk_norm="head"),
    _case("PhiConfig", num_key_value_heads=2),  # partial_rotary_factor 0.5
    _case("StableLmConfig", num_key_value_heads=2),  # partial 0.25
    _case("GPTNeoXConfig", attn={r"layers\.(\d+)\.attention": "decoder"}, q_in="query_key_value",
          k_in="query_key_value"),  # rotary_pct 0.25, fused rows (h three e)
    _case("GPTJConfig", attn={r"h\.(\d+)\.attn": "decoder"}, n_embd=32, n_layer=2, n_head=4, n_positions=512,
          rotary_dim=4),  # adjacent pairs over 4 of 8 dims
    _case("CohereConfig", num_key_value_heads=2),  # adjacent pairs
    _case("OlmoConfig"),
    _case("Starcoder2Config", num_key_value_heads=2),
    _case("GraniteConfig", num_key_value_heads=2),
    _case("Phi3Config", q_in="qkv_proj", k_in="qkv_proj", num_key_value_heads=2, pad_token_id=0),
    _case("Phi3Config", tag="-longrope", q_in="qkv_proj", k_in="qkv_proj", num_key_value_heads=2, pad_token_id=0,
          max_position_embeddings=2048, rope_parameters=dict(rope_type="longrope", rope_theta=10000.0,
                                                             original_max_position_embeddings=512,
                                                             short_factor=[1.0, 1.5, 2.0, 3.0],
                                                             long_factor=[2.0, 4.0, 8.0, 16.0])),  # fmt: skip
    _case("MixtralConfig", num_key_value_heads=2, num_local_experts=2, num_experts_per_tok=1, intermediate_size=48),
    _case("Qwen2MoeConfig", num_key_value_heads=2, num_experts=2, num_experts_per_tok=1, moe_intermediate_size=8,
          shared_expert_intermediate_size=8),
    _case("Qwen3MoeConfig", num_key_value_heads=2, head_dim=8, num_experts=2, num_experts_per_tok=1,
          moe_intermediate_size=8, qk_norm="head"),
    _case("Olmo2Config", num_key_value_heads=2, qk_norm="proj"),
    dataclasses.replace(_case("FalconConfig", attn={r"h\.(\d+)\.self_attention": "decoder"}, q_in="query_key_value",
                              k_in="query_key_value", alibi=False, multi_query=False, new_decoder_architecture=False),
                        capture="matmul"),  # no attention interface: the first q @ k^T of its eager forward
    _case("ModernBertConfig", attn={r"layers\.(\d+)\.attn": "encoder"}, q_in="Wqkv", k_in="Wqkv", pad_token_id=0,
          bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2, local_attention=4),
]


#: rotary model types without a case here, and why
NO_CASE = {"mobilellm": "remote-code config; LLaMA tensors and modeling (the llama cases)"}


def test_every_rotary_family_has_a_case() -> None:
    from attnscope.families.rope import HF_ADJACENT, HF_HALF_SPLIT

    covered = {c.config().model_type for c in CASES}
    assert (HF_HALF_SPLIT | HF_ADJACENT) - covered == set(NO_CASE)


def rotated_logits(call, q: np.ndarray, k: np.ndarray, kv: np.ndarray, layouts: RotaryLayout,
                   positions: np.ndarray) -> np.ndarray:  # fmt: skip
    """x_i Q[h] G(p_i - p_j) K[g(h)]^T x_j^T for every head and (i, j), float64: [b, h, i, j]."""
    qx = np.einsum("bid,hde->bhie", call.x.double().numpy(), q.astype(np.float64))
    kx = np.einsum("bjd,gde->bgje", call.xk.double().numpy(), k.astype(np.float64))[:, kv]
    out = np.empty(qx.shape[:3] + (kx.shape[2],))
    for i, pi in enumerate(positions):
        for j, pj in enumerate(positions):
            g = rotation_matrix(layouts, int(pi - pj))
            out[:, :, i, j] = np.einsum("bhe,ef,bhf->bh", qx[:, :, i], g, kx[:, :, j])
    return out


def _check(case: Case, tmp_path, pairing: str | None = None) -> float:
    """Largest relative error of our rotated logits over all layers (``pairing`` forces a wrong one)."""
    model, cfg = build(case)
    model.save_pretrained(tmp_path)
    fold = "qk" if case.qk_norm else "none"
    worst = 0.0
    with open_source(str(tmp_path)) as src:
        spec = get_family(src.config)
        infos = {i.stack: i for i in spec.stacks(src.config, src)}
        calls = run(case, model, cfg)
        assert calls
        for call in calls:
            info = infos[call.stack]
            f = spec.layer_factors(src, info, call.layer, fold)
            layout = rotary_layout(src.config, info, call.layer, src)
            assert layout is not None
            if pairing is not None:
                layout = _repaired(layout, pairing)
            got = rotated_logits(call, f.q, f.k, f.kv_index, layout, POSITIONS.numpy())
            if case.qk_norm:
                raw = spec.layer_factors(src, info, call.layer)
                got = got / rms_scales(call, raw.q, raw.k, raw.kv_index, cfg.rms_norm_eps, case.qk_norm)
            want = model_logits(call)
            assert np.abs(want).max() > 1e-2, "degenerate logits"
            worst = max(worst, float(np.abs(got - want).max() / np.abs(want).max()))
    return worst


def _repaired(layout: RotaryLayout, pairing: str) -> RotaryLayout:
    from attnscope.families.rope import make_layout

    return make_layout(layout.e, 2 * layout.n_pairs, layout.inv_freq, pairing, scale=layout.scale)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_rotated_form_reproduces_model_logits(case: Case, tmp_path) -> None:
    assert _check(case, tmp_path) < 2e-5, case.id


@pytest.mark.parametrize("case_id,wrong", [("LlamaConfig", ADJACENT), ("GPTJConfig", HALF_SPLIT),
                                           ("CohereConfig", HALF_SPLIT)])
def test_gold_test_catches_the_wrong_pairing(case_id: str, wrong: str, tmp_path) -> None:
    case = next(c for c in CASES if c.id == case_id)
    assert _check(case, tmp_path, pairing=wrong) > 1e-2


def test_gold_test_catches_ignored_scaling(tmp_path) -> None:
    """The linear case read as unscaled frequencies does not match: the frequencies are really checked."""
    case = next(c for c in CASES if c.id == "LlamaConfig-linear")
    model, cfg = build(case)
    plain = dataclasses.replace(case, config=lambda: _config("LlamaConfig", num_key_value_heads=2,
                                                             rope_parameters=dict(rope_type="default", rope_theta=500.0)))
    assert _check(case, tmp_path / "a") < 2e-5
    assert _check(plain, tmp_path / "b") < 2e-5
    from attnscope.families.base import StackInfo

    info = StackInfo("decoder", 2, 4, 2, 32, 8)
    lin = rotary_layout(cfg.to_dict(), info, 0)
    base = rotary_layout(plain.config().to_dict(), info, 0)
    np.testing.assert_allclose(lin.inv_freq * 4.0, base.inv_freq)


# ---- GGUF: llama.cpp's permuted rows (adjacent pairs) and NEOX archs (half-split) --------------

sys.path.insert(0, str(Path(__file__).parents[1] / "zoo"))


@pytest.mark.parametrize("arch,permute,pairing", [("llama", True, ADJACENT), ("qwen2", False, HALF_SPLIT)])
def test_gguf_rotated_form_reproduces_hf_logits(arch: str, permute: bool, pairing: str, tmp_path) -> None:
    pytest.importorskip("gguf")
    from _fakes import write_llama_gguf

    case = _case("LlamaConfig", "LlamaForCausalLM", num_key_value_heads=2)  # the tensor names the writer reads
    model, cfg = build(case)
    path = write_llama_gguf(tmp_path / f"{arch}.gguf", model, cfg, arch=arch, permute=permute)
    calls = run(case, model, cfg)
    with open_source(str(path)) as src:
        spec = get_family(src.config)
        info = spec.stacks(src.config, src)[0]
        for call in calls:
            f = spec.layer_factors(src, info, call.layer)
            layout = rotary_layout(src.config, info, call.layer, src)
            assert layout.pairing == pairing
            got = rotated_logits(call, f.q, f.k, f.kv_index, layout, POSITIONS.numpy())
            want = model_logits(call)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=2e-5 * np.abs(want).max())
            wrong = _repaired(layout, HALF_SPLIT if pairing == ADJACENT else ADJACENT)
            bad = rotated_logits(call, f.q, f.k, f.kv_index, wrong, POSITIONS.numpy())
            assert np.abs(bad - want).max() > 1e-2 * np.abs(want).max()
