"""score(spectra=True): the spectral columns of real on-disk models against explicit d x d spectra, the
default table unchanged, rotary offsets, NaN weights, and bad arguments."""

from __future__ import annotations

import shutil
import warnings

import numpy as np
import pytest

from attnscope.errors import ArgumentTypeError
from attnscope.families.base import AttentionFactors
from attnscope.geometry import RECORD_COLUMNS, SPECTRA_COLUMNS, score, score_factors

from .models import llama_reference
from .test_spectra import ref_columns


def test_llama_spectra_match_explicit_reference(tiny_llama, tiny_llama_dirs):
    df = score(str(tiny_llama_dirs["sharded"]), spectra=True)
    assert list(df.columns[: len(RECORD_COLUMNS)]) == RECORD_COLUMNS
    assert set(SPECTRA_COLUMNS) <= set(df.columns)
    ref = llama_reference(tiny_llama)  # explicit M per (layer, head) and (layer, None), GQA written out
    for _, row in df.iterrows():
        key = (int(row["layer"]), None if row["level"] == "layer" else int(row["head"]))
        want = ref_columns(ref[key])
        for col in SPECTRA_COLUMNS:
            assert row[col] == pytest.approx(want[col], abs=1e-4 * max(1.0, want[col])), (key, col)
        assert 0 < row["anti_rank"] <= 2 * row["d_head"] if row["level"] == "head" else True


def test_default_table_unchanged(tiny_llama_dirs):
    plain = score(str(tiny_llama_dirs["single"]))
    assert not set(SPECTRA_COLUMNS) & set(plain.columns)
    with_spectra = score(str(tiny_llama_dirs["single"]), spectra=True)
    assert [c for c in with_spectra.columns if c not in SPECTRA_COLUMNS] == list(plain.columns)
    assert [c for c in with_spectra.columns if c in SPECTRA_COLUMNS] == list(SPECTRA_COLUMNS)
    assert with_spectra[plain.columns].equals(plain)
    assert (with_spectra[list(SPECTRA_COLUMNS)].dtypes == "float64").all()


def test_offsets_give_the_rotated_spectra(tiny_llama_dirs, tiny_bert_dir):
    path = str(tiny_llama_dirs["single"])
    df = score(path, offsets=[0, 9], spectra=True)
    plain = score(path, spectra=True)
    at0 = df[df["offset"] == 0].drop(columns="offset").reset_index(drop=True)
    np.testing.assert_allclose(at0[list(SPECTRA_COLUMNS)].to_numpy(), plain[list(SPECTRA_COLUMNS)].to_numpy())
    at9 = df[df["offset"] == 9]
    assert not np.allclose(at9["anti_rank"].to_numpy(), at0["anti_rank"].to_numpy())  # rotary: the form moves
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the "not rotary" note
        bert = score(str(tiny_bert_dir), offsets=[0, 9], spectra=True)
    a, b = (bert[bert["offset"] == o][list(SPECTRA_COLUMNS)].to_numpy() for o in (0, 9))
    np.testing.assert_array_equal(a, b)  # absolute positions: the same form at every offset


def test_nan_weights_give_nan_spectra(tiny_llama_dirs, tmp_path):
    from safetensors.torch import load_file, save_file

    d = tmp_path / "nan"
    shutil.copytree(tiny_llama_dirs["single"], d)
    sd = load_file(d / "model.safetensors")
    sd["model.layers.1.self_attn.q_proj.weight"][8:16, 3] = float("nan")  # query head 1 of layer 1
    save_file(sd, d / "model.safetensors", metadata={"format": "pt"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        df = score(str(d), spectra=True)
    nan = df[df["anti_rank"].isna()]
    got = {(int(r.layer), r.level, None if r.level == "layer" else int(r.head)) for r in nan.itertuples()}
    assert got == {(1, "head", 1), (1, "layer", None)}
    assert df[list(SPECTRA_COLUMNS)].isna().sum().tolist() == [2] * 4


def test_score_factors_spectra_and_bad_argument():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((4, 16, 4)).astype(np.float32)
    k = q[::2].copy()  # heads 0 and 2 have Q = K: symmetric
    f = AttentionFactors(stack="decoder", layer=0, q=q, k=k)
    recs = score_factors(f, spectra=True)
    heads = [r for r in recs if r["level"] == "head"]
    assert heads[0]["anti_rank"] == 0 and heads[0]["sym_signature"] == pytest.approx(1.0)
    assert heads[1]["anti_rank"] > 1
    with pytest.raises(ArgumentTypeError, match="spectra must be True or False"):
        score_factors(f, spectra="yes")
    with pytest.raises(ArgumentTypeError, match="spectra must be True or False"):
        score("nowhere", spectra=1)


def test_spectrum_values_are_the_explicit_spectra(tiny_llama, tiny_llama_dirs):
    from attnscope.geometry import spectrum_values
    from attnscope.geometry.spectra import spectra_ref

    vals = spectrum_values(str(tiny_llama_dirs["single"]), levels=("head", "layer"))
    assert set(vals["part"]) == {"sym", "anti"} and (vals["model"].nunique(), vals["family"].iloc[0]) == (1, "llama")
    ref = llama_reference(tiny_llama)
    for (layer, head), m in ref.items():
        level = "layer" if head is None else "head"
        rows = vals[(vals["layer"] == layer) & (vals["level"] == level)
                    & (vals["head"].isna() if head is None else vals["head"] == head)]
        lam, sv = spectra_ref(m)
        for part, want in (("sym", lam), ("anti", sv)):
            got = rows[rows["part"] == part].sort_values("index")["value"].to_numpy()
            n = min(len(got), len(want))
            scale = np.linalg.norm(m)
            np.testing.assert_allclose(np.sort(got[:n]), np.sort(want[:n]), atol=1e-6 * scale)
            assert np.abs(got[n:]).max(initial=0) < 1e-6 * scale and np.abs(want[n:]).max(initial=0) < 1e-6 * scale
    heads = vals[vals["level"] == "head"]
    assert heads["kv_head"].dropna().isin([0, 1]).all() and len(heads) == 2 * 4 * 2 * 16  # layers x heads x parts x 2e
