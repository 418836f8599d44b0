"""score(): records from real on-disk models match an explicit reference; NaN weights; summarize."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from attnscope.errors import FormatError, InputError, UnsupportedError
from attnscope.families.base import AttentionFactors
from attnscope.geometry import RECORD_COLUMNS, NonFiniteWeightsWarning, score, score_factors, summarize
from attnscope.geometry.kernels import directionality_ref, symmetry_ref

from .models import llama_reference


@pytest.mark.parametrize("layout", ["single", "sharded", "bin"])
def test_llama_gqa_matches_explicit_reference(tiny_llama, tiny_llama_dirs, layout):
    df = score(str(tiny_llama_dirs[layout]))
    assert list(df.columns[: len(RECORD_COLUMNS)]) == RECORD_COLUMNS
    ref = llama_reference(tiny_llama)
    assert len(df) == len(ref) == 2 * (4 + 1)
    assert set(df["stack"]) == {"decoder"} and set(df["family"]) == {"llama"}
    for _, row in df.iterrows():
        key = (int(row["layer"]), None if row["level"] == "layer" else int(row["head"]))
        m = ref[key]
        assert row["symmetry"] == pytest.approx(symmetry_ref(m), abs=1e-5)
        assert row["directionality"] == pytest.approx(directionality_ref(m), abs=1e-5)
        assert row["frobenius_norm"] == pytest.approx(np.linalg.norm(m), rel=1e-5)
    heads = df[df["level"] == "head"]
    assert heads["kv_head"].tolist() == [0, 0, 1, 1] * 2  # h // (n_q / n_kv)
    assert (heads[["n_heads", "n_kv_heads", "d_model", "d_head"]].iloc[0].tolist()) == [4, 2, 32, 8]
    layers = df[df["level"] == "layer"]
    assert layers["head"].isna().all() and layers["kv_head"].isna().all()


def test_levels_stacks_and_k(tiny_llama_dirs):
    path = str(tiny_llama_dirs["single"])
    assert set(score(path, levels=("layer",))["level"]) == {"layer"}
    assert set(score(path, levels=("head",))["level"]) == {"head"}
    with pytest.raises(InputError, match="no encoder stack"):
        score(path, stacks=("encoder",))
    assert set(score(path, stacks="decoder", levels="layer")["stack"]) == {"decoder"}
    with pytest.raises(InputError, match="level"):
        score(path, levels=("neuron",))
    a, b = score(path, k=0.5), score(path, k=3.0)
    assert not np.allclose(a["n_outlier_rows"].astype(float), b["n_outlier_rows"].astype(float))


def test_bert_encoder(tiny_bert_dir):
    df = score(str(tiny_bert_dir))
    assert set(df["stack"]) == {"encoder"} and set(df["family"]) == {"bert"}
    assert len(df) == 3 * (4 + 1)
    assert np.isfinite(df["symmetry"]).all() and np.isfinite(df["directionality"]).all()


def test_nan_weights_warn_once_and_spare_other_heads(tiny_llama_dirs, tmp_path):
    import shutil

    from safetensors.torch import load_file, save_file

    d = tmp_path / "nan"
    shutil.copytree(tiny_llama_dirs["single"], d)
    sd = load_file(d / "model.safetensors")
    sd["model.layers.1.self_attn.q_proj.weight"][8:16, 3] = float("nan")  # query head 1 of layer 1
    sd["model.layers.0.self_attn.k_proj.weight"][0, 0] = float("inf")  # kv head 0 -> query heads 0, 1
    save_file(sd, d / "model.safetensors", metadata={"format": "pt"})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = score(str(d))
    ours = [w for w in caught if issubclass(w.category, NonFiniteWeightsWarning)]
    assert len(ours) == 1 and "non-finite" in str(ours[0].message)
    nan = df[df["symmetry"].isna()]
    got = {(int(r.layer), r.level, None if r.level == "layer" else int(r.head)) for r in nan.itertuples()}
    assert got == {(0, "head", 0), (0, "head", 1), (0, "layer", None), (1, "head", 1), (1, "layer", None)}
    assert df["directionality"].isna().sum() == 5
    assert df.drop(nan.index)["symmetry"].notna().all() and len(df) == 10


def test_score_factors_zero_head_is_quiet():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((4, 16, 4)).astype(np.float32)
    q[2] = 0
    k = rng.standard_normal((4, 16, 4)).astype(np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        recs = score_factors(AttentionFactors("encoder", 3, q, k), levels=("head", "layer"))
    assert len(recs) == 5 and recs[2]["symmetry"] == 0.0 and recs[2]["frobenius_norm"] == 0.0
    assert all(r["layer"] == 3 and r["stack"] == "encoder" for r in recs)
    assert "model" not in recs[0]


def test_score_factors_rejects_bad_shapes():
    with pytest.raises(FormatError):
        score_factors(AttentionFactors("encoder", 0, np.ones((4, 8)), np.ones((4, 8, 2))))


def test_unsupported_family(tiny_llama_dirs, tmp_path):
    import shutil

    d = tmp_path / "weird"
    shutil.copytree(tiny_llama_dirs["single"], d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["model_type"] = "weirdformer"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedError, match="weirdformer"):
        score(str(d))


def test_wrong_shape_for_config(tiny_llama_dirs, tmp_path):
    import shutil

    from attnscope.errors import AttnscopeError

    d = tmp_path / "shape"
    shutil.copytree(tiny_llama_dirs["single"], d)
    cfg = json.loads((d / "config.json").read_text())
    cfg["num_key_value_heads"] = 4  # k_proj holds 2 kv heads of 8
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(AttnscopeError):
        score(str(d))


def test_summarize_median_and_iqr(tiny_llama_dirs, tiny_bert_dir):
    import pandas as pd

    df = pd.concat([score(str(tiny_llama_dirs["single"])), score(str(tiny_bert_dir))], ignore_index=True)
    summ = summarize(df)
    assert len(summ) == 2 and set(summ["stack"]) == {"decoder", "encoder"}
    for _, row in summ.iterrows():
        vals = df[(df["model"] == row["model"]) & (df["level"] == "layer")]["directionality"].to_numpy(float)
        assert row["directionality_median"] == pytest.approx(np.median(vals))
        assert row["directionality_q1"] == pytest.approx(np.percentile(vals, 25))
        assert row["directionality_q3"] == pytest.approx(np.percentile(vals, 75))
    heads_only = summarize(df[df["level"] == "head"])
    assert set(heads_only["level"]) == {"head"}


def test_minilm_real_model(minilm_dir):
    df = score(str(minilm_dir), name="all-MiniLM-L6-v2")
    heads, layers = df[df["level"] == "head"], df[df["level"] == "layer"]
    assert len(heads) == 6 * 12 and len(layers) == 6
    assert set(df["stack"]) == {"encoder"} and set(df["family"]) == {"bert"}
    assert np.isfinite(df[["symmetry", "directionality", "frobenius_norm"]].to_numpy(float)).all()
    s = summarize(df).iloc[0]
    # a trained BERT-style encoder: clearly symmetric W_qk (the paper's BERT range is +0.26 ... +0.77)
    assert 0.2 < s["symmetry_median"] < 0.9
    assert -1.0 <= s["directionality_median"] <= 1.0


def test_weight_source_object_and_wqk_block(tiny_llama, tiny_llama_dirs):
    """A live model's state dict (DictSource) scores like its files; wqk_block is the explicit M_L."""
    from attnscope.geometry import wqk_block
    from attnscope.sources import DictSource

    src = DictSource.from_module(tiny_llama, tiny_llama.config.to_dict(), name="live")
    live = score(src)
    disk = score(str(tiny_llama_dirs["single"]))
    np.testing.assert_allclose(live["symmetry"], disk["symmetry"], atol=1e-12)
    assert set(live["model"]) == {"live"}
    ref = llama_reference(tiny_llama)
    block = wqk_block(src, layer=1, n=20)
    np.testing.assert_allclose(block, ref[(1, None)][:20, :20], rtol=1e-4, atol=1e-5)
    with pytest.raises(InputError, match="out of range"):
        wqk_block(src, layer=5)


def test_progress_bar_goes_to_stderr(tiny_llama_dirs, capsys):
    df = score(str(tiny_llama_dirs["single"]), progress=True)
    out, _ = capsys.readouterr()
    assert len(df) == 10 and out == ""  # nothing on stdout (the bar is on stderr, transient)
