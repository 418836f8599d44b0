"""GGUF source + family: layout against a tiny HF llama (GQA, RoPE permutation), quantised copies, bad files."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from attnscope.errors import FormatError
from attnscope.families import get_family
from attnscope.sources import open_source
from attnscope.sources.gguf import GGUFSource

sys.path.insert(0, str(Path(__file__).parents[1] / "zoo"))
from _fakes import (  # noqa: E402
    explicit_head_matrices,
    factor_head_matrices,
    llama_rope_permute,
    tiny_llama,
    write_llama_gguf,
)


@pytest.fixture(scope="module")
def llama():
    return tiny_llama(n_layers=2, d=64, n_heads=4, n_kv=2)


@pytest.fixture(scope="module")
def gguf_files(llama, tmp_path_factory):
    model, cfg = llama
    root = tmp_path_factory.mktemp("gguf")
    return {q: write_llama_gguf(root / f"tiny-{q}.gguf", model, cfg, qtype=q) for q in ("F32", "F16", "BF16", "Q8_0")}


def _hf_heads(model, cfg, layer):
    a = model.model.layers[layer].self_attn
    return explicit_head_matrices(a.q_proj.weight.detach().numpy(), a.k_proj.weight.detach().numpy(),
                                  cfg.num_attention_heads, cfg.num_key_value_heads)


def test_config_from_metadata(gguf_files):
    src = open_source(str(gguf_files["F32"]))
    assert isinstance(src, GGUFSource)
    c = src.config
    assert c["model_type"] == "gguf:llama"
    assert (c["num_attention_heads"], c["num_key_value_heads"], c["hidden_size"], c["num_hidden_layers"]) == (4, 2, 64, 2)


def test_rope_permutation_is_really_in_the_file(llama, gguf_files):
    """The file's rows differ from HF's (so the next test checks per-head slicing for real)."""
    model, cfg = llama
    src = open_source(str(gguf_files["F32"]))
    wq_file = src.get_numpy("blk.0.attn_q.weight")
    wq_hf = model.model.layers[0].self_attn.q_proj.weight.detach().numpy()
    assert not np.allclose(wq_file, wq_hf)
    np.testing.assert_allclose(wq_file, llama_rope_permute(wq_hf, 4), rtol=0, atol=0)


@pytest.mark.parametrize("qtype,tol", [("F32", 1e-5), ("F16", 2e-3), ("BF16", 2e-2), ("Q8_0", 2e-2)])
def test_head_matrices_equal_hf(llama, gguf_files, qtype, tol):
    model, cfg = llama
    src = open_source(str(gguf_files[qtype]))
    assert src.tensor_type("blk.0.attn_q.weight") == qtype
    facs = list(get_family(src.config).iter_factors(src))
    assert [(f.stack, f.layer) for f in facs] == [("decoder", 0), ("decoder", 1)]
    for f in facs:
        assert f.q.shape == (4, 64, 16) and f.k.shape == (2, 64, 16) and f.q.dtype == np.float32
        ref = _hf_heads(model, cfg, f.layer)
        got = factor_head_matrices(f.q, f.k)
        rel = np.abs(got - ref).max() / np.abs(ref).max()
        assert rel < tol, (qtype, f.layer, rel)


def test_wrong_gqa_pairing_would_be_caught(llama, gguf_files):
    """Sanity: pairing h with h mod n_kv (the paper's bug) gives different matrices here."""
    model, cfg = llama
    f = next(get_family(open_source(str(gguf_files["F32"])).config).iter_factors(open_source(str(gguf_files["F32"]))))
    wrong = np.einsum("hde,hfe->hdf", f.q, f.k[np.arange(4) % 2])
    assert not np.allclose(wrong, _hf_heads(model, cfg, 0), atol=1e-3)


def test_scores_match_hf_path(llama, gguf_files):
    """geometry.score on the GGUF file equals the HF state-dict path (exact for F32, close for Q8_0)."""
    from attnscope import geometry
    from attnscope.errors import UnsupportedError
    from attnscope.sources import DictSource

    model, cfg = llama
    hf = DictSource({k: v.detach() for k, v in model.state_dict().items()}, cfg.to_dict(), name="hf")
    try:
        ref = geometry.score(hf)
    except UnsupportedError:
        pytest.skip("HF llama family spec not available yet")
    cols = ["symmetry", "directionality", "frobenius_norm"]
    key = ["stack", "level", "layer", "head"]
    ref = ref.sort_values(key).reset_index(drop=True)
    for qtype, tol in (("F32", 1e-4), ("Q8_0", 3e-2)):
        got = geometry.score(str(gguf_files[qtype])).sort_values(key).reset_index(drop=True)
        assert len(got) == len(ref) > 0
        for c in cols:
            r = ref[c].to_numpy(float)
            scale = np.abs(r).max() if c == "frobenius_norm" else 1.0
            np.testing.assert_allclose(got[c].to_numpy(float) / scale, r / scale, atol=tol, err_msg=f"{qtype} {c}")


def test_real_tinycoder_file(tinycoder_gguf):
    src = open_source(str(tinycoder_gguf))
    assert src.config["model_type"] == "gguf:llama"
    facs = list(get_family(src.config).iter_factors(src))
    assert len(facs) == 2 == src.config["num_hidden_layers"]
    for f in facs:
        assert f.q.shape[0] == src.config["num_attention_heads"] and np.isfinite(f.q).all() and np.isfinite(f.k).all()
        assert np.abs(factor_head_matrices(f.q, f.k)).sum() > 0


def test_truncated_file_is_one_line_format_error(gguf_files, tmp_path):
    bad = tmp_path / "cut.gguf"
    data = gguf_files["F32"].read_bytes()
    for cut in (len(data) - 100, 200, 10):
        bad.write_bytes(data[:cut])
        with pytest.raises(FormatError) as ei:
            open_source(str(bad))
        assert "\n" not in str(ei.value) and "cut.gguf" in str(ei.value)


def test_unknown_version_and_not_gguf(gguf_files, tmp_path):
    bad = tmp_path / "v99.gguf"
    data = bytearray(gguf_files["F32"].read_bytes())
    data[4:8] = (99).to_bytes(4, "little")
    bad.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="version"):
        open_source(str(bad))
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf file at all")
    with pytest.raises(FormatError, match="not a GGUF"):
        open_source(str(junk))


def test_missing_tensor_is_format_error(gguf_files):
    src = open_source(str(gguf_files["F32"]))
    with pytest.raises(FormatError):
        src.get("blk.7.attn_q.weight")


def test_fused_qkv_phi3_layout(llama, tmp_path):
    """arch phi3: one attn_qkv tensor with rows [q | k | v] is split at the right rows."""
    model, cfg = llama
    path = write_llama_gguf(tmp_path / "phi3.gguf", model, cfg, arch="phi3", fused=True, permute=False)
    src = open_source(str(path))
    assert src.config["model_type"] == "gguf:phi3" and src.has("blk.0.attn_qkv.weight")
    for f in get_family(src.config).iter_factors(src):
        ref = _hf_heads(model, cfg, f.layer)
        np.testing.assert_allclose(factor_head_matrices(f.q, f.k), ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_family_name_is_the_model_type(gguf_files):
    src = open_source(str(gguf_files["F32"]))
    assert get_family(src.config).name == "gguf:llama"
    assert get_family({"model_type": "gguf:qwen2"}).name == "gguf:qwen2"


def test_fused_qkv_of_an_unverified_arch_is_refused(llama, tmp_path):
    from attnscope.errors import UnsupportedError

    model, cfg = llama
    path = write_llama_gguf(tmp_path / "q.gguf", model, cfg, arch="qwen2", fused=True, permute=False)
    src = open_source(str(path))
    with pytest.raises(UnsupportedError, match="unverified"):
        list(get_family(src.config).iter_factors(src))


def test_real_tinycoder_scores(tinycoder_gguf):
    from attnscope.geometry import score

    df = score(str(tinycoder_gguf))
    layers = df[df["level"] == "layer"]
    assert sorted(layers["layer"]) == [0, 1] and set(df["stack"]) == {"decoder"}
    assert np.isfinite(df[["symmetry", "directionality"]].to_numpy(float)).all()
