"""Rotary conventions read from configs and GGUF metadata (rotary_layout): the cases the gold tests cannot build."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnscope.errors import UnsupportedError
from attnscope.families.base import StackInfo
from attnscope.families.rope import ADJACENT, HALF_SPLIT, default_inv_freq, rotary_layout
from attnscope.sources import DictSource

INFO = StackInfo("decoder", 12, 4, 1, 64, 16)


def gguf(arch: str, **meta) -> dict:
    return {"model_type": f"gguf:{arch}", "architecture": arch, "gguf_metadata": {f"{arch}.{k}": v for k, v in meta.items()}}


def test_gguf_gemma3_sliding_and_full_layers() -> None:
    cfg = gguf("gemma3", **{"rope.freq_base": 1e6, "attention.sliding_window": 512})
    bases = [rotary_layout(cfg, INFO, i).inv_freq[1] for i in range(12)]
    local, full = default_inv_freq(1e4, 16)[1], default_inv_freq(1e6, 16)[1]
    assert bases == pytest.approx([local] * 5 + [full] + [local] * 5 + [full])
    no_swa = gguf("gemma3", **{"rope.freq_base": 1e6})
    assert rotary_layout(no_swa, INFO, 0).inv_freq[1] == pytest.approx(full)


def test_gguf_pairing_partial_rotary_linear_scaling_and_freq_factors() -> None:
    lay = rotary_layout(gguf("llama", **{"rope.dimension_count": 8, "rope.scaling.type": "linear",
                                         "rope.scaling.factor": 4.0}), INFO, 0)  # fmt: skip
    assert lay.pairing == ADJACENT and lay.n_pairs == 4 and lay.unrotated.tolist() == list(range(8, 16))
    np.testing.assert_allclose(lay.inv_freq, default_inv_freq(1e4, 8) / 4)
    assert rotary_layout(gguf("qwen2"), INFO, 0).pairing == HALF_SPLIT
    factors = np.array([1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0, 8.0], dtype=np.float32)
    src = DictSource({"rope_freqs.weight": torch.from_numpy(factors)}, gguf("llama"))
    lay = rotary_layout(src.config, INFO, 0, src)
    np.testing.assert_allclose(lay.inv_freq, default_inv_freq(1e4, 16) / factors)


@pytest.mark.parametrize("cfg", [gguf("mistral"), gguf("llama", **{"rope.scaling.type": "yarn"}),
                                 {"model_type": "weirdformer", "rope_theta": 1e4},
                                 {"model_type": "qwen2", "rope_parameters": {"rope_type": "default", "rope_theta": 1e4,
                                                                             "mrope_section": [2, 3, 3]}}])
def test_unhandled_rotary_variants_are_one_error(cfg) -> None:
    with pytest.raises(UnsupportedError):
        rotary_layout(cfg, INFO, 0)


@pytest.mark.parametrize("cfg", [gguf("gpt2"), {"model_type": "bert"}, {"model_type": "bloom"},
                                 {"model_type": "falcon", "alibi": True}, {"model_type": "attnscope", "pos": "learned"}])
def test_non_rotary_families(cfg) -> None:
    assert rotary_layout(cfg, INFO, 0) is None


def test_attnscope_rotary_and_hf_partial() -> None:
    lay = rotary_layout({"model_type": "attnscope", "pos": "rotary"}, INFO, 0)
    assert lay.pairing == HALF_SPLIT and lay.n_pairs == 8
    neox = rotary_layout({"model_type": "gpt_neox", "rotary_pct": 0.25, "rotary_emb_base": 500.0}, INFO, 0)  # 4.x keys
    assert neox.n_pairs == 2 and neox.inv_freq[1] == pytest.approx(500.0 ** -0.5)


def test_sliding_windows() -> None:
    cfg = {"model_type": "gemma3_text", "head_dim": 16, "sliding_window": 64,
           "layer_types": ["sliding_attention", "full_attention"],
           "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
                               "full_attention": {"rope_type": "default", "rope_theta": 1e6}}}
    assert [rotary_layout(cfg, INFO, i).window for i in (0, 1)] == [64, None]
    mistral = {"model_type": "mistral", "sliding_window": 32, "rope_theta": 1e4}
    assert rotary_layout(mistral, INFO, 3).window == 32
    assert rotary_layout({**mistral, "sliding_window": None}, INFO, 3).window is None
    g = gguf("gemma3", **{"attention.sliding_window": 512})
    assert [rotary_layout(g, INFO, i).window for i in (0, 5)] == [512, None]
