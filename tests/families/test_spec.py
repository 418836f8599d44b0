"""The spec mechanism itself: kv mapping, name resolution by suffix, shape checks, one-line errors, coverage."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.errors import ConfigError, FormatError, UnsupportedError
from attnscope.families import get_family, kv_head_index, registry
from attnscope.families.declarative import DeclarativeSpec, pattern_shape
from attnscope.sources import DictSource

from .gold import unavailable
from .test_gold import CASES

OURS = ("encoders", "decoders", "seq2seq", "perception")


def _llama_config(n_q: int = 4, n_kv: int = 2, d: int = 32, layers: int = 2) -> dict:
    return {"model_type": "llama", "hidden_size": d, "num_hidden_layers": layers,
            "num_attention_heads": n_q, "num_key_value_heads": n_kv}


def _llama_tensors(cfg: dict, prefix: str = "model.", dtype=torch.float32) -> dict:
    g = torch.Generator().manual_seed(0)
    d, n_q, n_kv = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"]
    e = d // n_q
    out = {}
    for i in range(cfg["num_hidden_layers"]):
        out[f"{prefix}layers.{i}.self_attn.q_proj.weight"] = torch.randn(n_q * e, d, generator=g).to(dtype)
        out[f"{prefix}layers.{i}.self_attn.k_proj.weight"] = torch.randn(n_kv * e, d, generator=g).to(dtype)
        out[f"{prefix}layers.{i}.self_attn.v_proj.weight"] = torch.randn(n_kv * e, d, generator=g).to(dtype)
    return out


# -- the kv mapping -------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(n_kv=st.integers(1, 8), rep=st.integers(1, 8))
def test_kv_head_index_matches_hf_repeat_kv(n_kv: int, rep: int) -> None:
    from transformers.models.llama.modeling_llama import repeat_kv

    n_q = n_kv * rep
    keys = torch.arange(n_kv, dtype=torch.float32).view(1, n_kv, 1, 1)  # key head g holds the value g
    expanded = repeat_kv(keys, rep).view(n_q).long().numpy()  # which key head each query head sees in HF
    np.testing.assert_array_equal(kv_head_index(n_q, n_kv), expanded)


@pytest.mark.parametrize("n_q,n_kv,want", [(4, 4, [0, 1, 2, 3]), (4, 2, [0, 0, 1, 1]), (4, 1, [0, 0, 0, 0])])
def test_kv_head_index_mha_gqa_mqa(n_q: int, n_kv: int, want: list[int]) -> None:
    np.testing.assert_array_equal(kv_head_index(n_q, n_kv), want)


@pytest.mark.parametrize("n_q,n_kv", [(4, 3), (4, 0), (0, 1)])
def test_kv_head_index_rejects_bad_grouping(n_q: int, n_kv: int) -> None:
    with pytest.raises(ConfigError):
        kv_head_index(n_q, n_kv)


# -- name resolution ------------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["", "model.", "base.model.", "language_model.model."])
def test_any_checkpoint_prefix_resolves(prefix: str) -> None:
    cfg = _llama_config()
    tensors = _llama_tensors(cfg, prefix)
    factors = list(get_family(cfg).iter_factors(DictSource(tensors, cfg)))
    assert [(f.stack, f.layer) for f in factors] == [("decoder", 0), ("decoder", 1)]
    want = tensors[f"{prefix}layers.1.self_attn.k_proj.weight"].view(2, 8, 32).transpose(1, 2).numpy()
    np.testing.assert_array_equal(factors[1].k, want)


def test_bert_prefixes_of_different_heads_resolve() -> None:
    cfg = {"model_type": "bert", "hidden_size": 8, "num_hidden_layers": 1, "num_attention_heads": 2}
    w = torch.randn(8, 8)
    for prefix in ("", "bert.", "0.auto_model."):
        src = DictSource({f"{prefix}encoder.layer.0.attention.self.query.weight": w,
                          f"{prefix}encoder.layer.0.attention.self.key.weight": w}, cfg)
        (f,) = get_family(cfg).iter_factors(src)
        np.testing.assert_array_equal(f.q, f.k)


def test_keys_are_listed_once_per_source() -> None:
    cfg = _llama_config(layers=3)

    class Counting(DictSource):
        calls = 0

        def keys(self):
            Counting.calls += 1
            return super().keys()

    src = Counting(_llama_tensors(cfg), cfg)
    list(get_family(cfg).iter_factors(src))
    list(get_family(cfg).iter_factors(src))
    assert Counting.calls == 1


def test_half_precision_is_upcast_to_float32() -> None:
    cfg = _llama_config()
    tensors = _llama_tensors(cfg, dtype=torch.bfloat16)
    (f, _) = get_family(cfg).iter_factors(DictSource(tensors, cfg))
    assert f.q.dtype == np.float32 and f.k.dtype == np.float32
    want = tensors["model.layers.0.self_attn.q_proj.weight"].float().view(4, 8, 32).transpose(1, 2).numpy()
    np.testing.assert_array_equal(f.q, want)


def test_encoder_only_export_of_a_seq2seq_model_scores_its_encoder() -> None:
    cfg = {"model_type": "t5", "d_model": 8, "d_kv": 2, "num_heads": 2, "num_layers": 1}
    w = torch.randn(4, 8)
    src = DictSource({"encoder.block.0.layer.0.SelfAttention.q.weight": w,
                      "encoder.block.0.layer.0.SelfAttention.k.weight": w}, cfg)
    spec = get_family(cfg)
    assert [i.stack for i in spec.stacks(cfg, src)] == ["encoder"]
    assert [i.stack for i in spec.stacks(cfg)] == ["encoder", "decoder", "cross"]


# -- one-line errors ------------------------------------------------------------------------------


def test_missing_tensor_is_a_format_error_naming_it() -> None:
    cfg = _llama_config()
    tensors = _llama_tensors(cfg)
    del tensors["model.layers.1.self_attn.k_proj.weight"]
    with pytest.raises(FormatError, match=r"layers\.1\.self_attn\.k_proj\.weight") as err:
        list(get_family(cfg).iter_factors(DictSource(tensors, cfg)))
    assert "\n" not in str(err.value)


def test_more_layers_in_config_than_in_file_is_a_format_error() -> None:
    cfg = _llama_config()
    tensors = _llama_tensors(cfg)
    with pytest.raises(FormatError, match="layer 2 of 3"):
        list(get_family(cfg).iter_factors(DictSource(tensors, {**cfg, "num_hidden_layers": 3})))


def test_source_without_any_attention_tensor_is_a_format_error() -> None:
    cfg = _llama_config()
    with pytest.raises(FormatError):
        list(get_family(cfg).iter_factors(DictSource({"lm_head.weight": torch.zeros(3, 3)}, cfg)))


@pytest.mark.parametrize("bad_cfg", [{"num_key_value_heads": 4},  # wrong kv count
                                     {"hidden_size": 64}])  # wrong width
def test_wrong_shape_for_the_config_is_a_format_error(bad_cfg: dict) -> None:
    cfg = _llama_config()
    tensors = _llama_tensors(cfg)
    with pytest.raises(FormatError, match="has shape") as err:
        list(get_family(cfg).iter_factors(DictSource(tensors, {**cfg, **bad_cfg})))
    assert "\n" not in str(err.value)


def test_fused_wrong_shape_is_a_format_error() -> None:
    cfg = {"model_type": "phi3", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4,
           "num_key_value_heads": 2}
    src = DictSource({"model.layers.0.self_attn.qkv_proj.weight": torch.zeros(96, 32)}, cfg)  # MHA-sized, not GQA
    with pytest.raises(FormatError, match=r"needs \(64, 32\)"):
        list(get_family(cfg).iter_factors(src))


def test_ambiguous_suffix_is_a_format_error() -> None:
    cfg = _llama_config(layers=1)
    tensors = {**_llama_tensors(cfg, "a."), **_llama_tensors(cfg, "b.")}
    with pytest.raises(FormatError, match="several tensors"):
        list(get_family(cfg).iter_factors(DictSource(tensors, cfg)))


def test_missing_or_nonsense_config_keys_are_config_errors() -> None:
    cfg = _llama_config()
    tensors = _llama_tensors(cfg)
    for bad in ({k: v for k, v in cfg.items() if k != "num_attention_heads"},
                {**cfg, "num_attention_heads": 3},  # 32 not divisible by 3
                {**cfg, "num_attention_heads": "four"}):
        with pytest.raises(ConfigError):
            list(get_family(bad).iter_factors(DictSource(tensors, bad)))


@pytest.mark.parametrize("cfg", [{"model_type": "stablelm", "qk_layernorm": True},
                                 {"model_type": "cohere", "use_qk_norm": True},
                                 {"model_type": "phi", "qk_layernorm": True}])
def test_qk_norm_variants_are_refused(cfg: dict) -> None:
    cfg = {**cfg, "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4}
    with pytest.raises(UnsupportedError, match="normalises q and k"):
        get_family(cfg).stacks(cfg)


def test_albert_with_several_layers_per_group_is_refused() -> None:
    cfg = {"model_type": "albert", "hidden_size": 32, "num_attention_heads": 4, "num_hidden_groups": 1,
           "inner_group_num": 2}
    with pytest.raises(UnsupportedError, match="inner_group_num=2"):
        get_family(cfg).stacks(cfg)


def test_unsupported_model_type_names_the_supported_ones() -> None:
    with pytest.raises(UnsupportedError) as err:
        get_family({"model_type": "no-such-model"})
    msg = str(err.value)
    assert "'no-such-model'" in msg and "bert" in msg and "llama" in msg and "docs/families.md" in msg
    assert "\n" not in msg


# -- mechanism and coverage -----------------------------------------------------------------------


def test_pattern_shape_reads_the_stored_layout() -> None:
    sizes = {"h": 4, "e": 8, "d": 32, "three": 3}
    assert pattern_shape("(h e) d -> h d e", sizes) == (32, 32)
    assert pattern_shape("d (three h e) -> three h d e", sizes) == (32, 96)
    assert pattern_shape("(h three e) d -> three h d e", sizes) == (96, 32)


def _our_specs() -> list[DeclarativeSpec]:
    import importlib

    return [s for m in OURS for s in importlib.import_module(f"attnscope.families.{m}").SPECS]


#: model types without a transformers config class (remote code), scored by a gold-tested layout
NO_HF_CLASS = {"mobilellm": "llama"}


def test_every_model_type_has_a_gold_test() -> None:
    """Every declared model type has a gold case; on an older transformers, those it has no class for are
    the only ones not run (their cases skip, naming the family and the release)."""
    from transformers import CONFIG_MAPPING

    tested = {case.config().model_type for case in CASES if unavailable(case) is None}
    declared = {mt for spec in _our_specs() for mt in spec.model_types}
    untested = declared - tested - set(NO_HF_CLASS)
    assert set(NO_HF_CLASS) <= declared - tested
    assert {mt for mt in untested if mt in CONFIG_MAPPING} == set(), "a model type this transformers has is untested"
    for alias, twin in NO_HF_CLASS.items():
        assert get_family({"model_type": alias}).layout == get_family({"model_type": twin}).layout and twin in tested


def test_registry_holds_every_spec_named_after_its_model_type() -> None:
    reg = registry()
    for spec in _our_specs():
        (mt,) = spec.model_types
        assert reg[mt] is spec and spec.name == mt


def test_real_minilm_checkpoint(minilm_dir) -> None:
    from safetensors.torch import load_file

    cfg = json.loads((minilm_dir / "config.json").read_text())
    src = DictSource(load_file(str(minilm_dir / "model.safetensors")), cfg, name="all-MiniLM-L6-v2")
    factors = list(get_family(cfg).iter_factors(src))
    assert [f.layer for f in factors] == list(range(6))
    assert all(f.stack == "encoder" and f.q.shape == (12, 384, 32) and f.k.shape == (12, 384, 32) for f in factors)
    assert all(np.isfinite(f.q).all() and np.abs(f.q).max() > 0 for f in factors)


def test_docs_list_every_model_type() -> None:
    from pathlib import Path

    doc = Path(__file__).resolve().parents[2] / "docs" / "families.md"
    if not doc.exists():
        pytest.skip("docs not shipped with this checkout")
    text = doc.read_text()
    missing = [mt for spec in _our_specs() for mt in spec.model_types if f"`{mt}`" not in text]
    assert missing == []


def test_fused_tensor_is_read_once_per_layer() -> None:
    cfg = {"model_type": "phi3", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4,
           "num_key_value_heads": 2}
    tensors = {f"model.layers.{i}.self_attn.qkv_proj.weight": torch.randn(64, 32) for i in range(2)}

    class Counting(DictSource):
        reads: list[str] = []

        def get(self, name):
            Counting.reads.append(name)
            return super().get(name)

    list(get_family(cfg).iter_factors(Counting(tensors, cfg)))
    assert sorted(Counting.reads) == sorted(tensors)


@pytest.mark.parametrize("dtype,error", [(torch.int8, FormatError), (torch.float8_e4m3fn, UnsupportedError)])
def test_quantized_weights_are_refused_not_misread(dtype, error) -> None:
    cfg = _llama_config()
    tensors = {k: v.to(dtype) for k, v in _llama_tensors(cfg).items()}
    with pytest.raises(error, match="q_proj") as err:
        list(get_family(cfg).iter_factors(DictSource(tensors, cfg)))
    assert "\n" not in str(err.value)
