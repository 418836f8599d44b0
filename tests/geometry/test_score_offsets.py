"""geo.score(offsets=...) and geo.frequencies: offset 0 is today's table, rotary records match the explicit
form, non-rotary models say so in one line, bad offsets are refused."""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
import pytest

from attnscope import geometry as geo
from attnscope.errors import InputError, UnsupportedError
from attnscope.families import get_family
from attnscope.families.rope import rotary_layout
from attnscope.geometry.kernels import directionality_ref, symmetry_ref
from attnscope.geometry.rotary import offset_form
from attnscope.sources import open_source

OFFSETS = [0, 1, 16, 256, -7]


def test_offset_zero_is_exactly_todays_score(tiny_llama_dirs):
    path = str(tiny_llama_dirs["single"])
    plain = geo.score(path)
    df = geo.score(path, offsets=OFFSETS)
    assert df["offset"].tolist().count(0) == len(plain)
    assert len(df) == len(OFFSETS) * len(plain)
    at0 = df[df["offset"] == 0].drop(columns="offset").reset_index(drop=True)
    pd.testing.assert_frame_equal(at0, plain)
    assert not (df[df["offset"] == 256]["symmetry"].values == at0["symmetry"].values).all()


def test_records_are_the_rotated_form(tiny_llama_dirs):
    path = str(tiny_llama_dirs["single"])
    df = geo.score(path, offsets=OFFSETS)
    with open_source(path) as src:
        fam = get_family(src.config)
        info = fam.stacks(src.config, src)[0]
        f = fam.layer_factors(src, info, 1)
        lay = rotary_layout(src.config, info, 1, src)
    kv = f.kv_index
    for o in OFFSETS:
        rows = df[(df["offset"] == o) & (df["layer"] == 1)]
        ms = [offset_form(f.q[h], f.k[kv[h]], lay, o) for h in range(f.n_heads)]
        for h, m in enumerate(ms):
            rec = rows[(rows["level"] == "head") & (rows["head"] == h)].iloc[0]
            assert rec["symmetry"] == pytest.approx(symmetry_ref(m), abs=1e-5)
            assert rec["directionality"] == pytest.approx(directionality_ref(m), abs=1e-4)
        lay_rec = rows[rows["level"] == "layer"].iloc[0]
        assert lay_rec["symmetry"] == pytest.approx(symmetry_ref(sum(ms)), abs=1e-5)


def test_non_rotary_model_is_the_same_at_every_offset_and_says_so(tiny_bert_dir):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = geo.score(str(tiny_bert_dir), offsets=[0, 5, -5])
    notes = [w for w in caught if issubclass(w.category, geo.PositionNote)]
    assert len(notes) == 1 and "same at every offset" in str(notes[0].message)
    by = [df[df["offset"] == o]["symmetry"].to_numpy() for o in (0, 5, -5)]
    np.testing.assert_array_equal(by[0], by[1])
    np.testing.assert_array_equal(by[0], by[2])
    with pytest.raises(UnsupportedError, match="no rotary positions"):
        geo.frequencies(str(tiny_bert_dir))


def test_without_offsets_nothing_changes(tiny_llama_dirs):
    assert "offset" not in geo.score(str(tiny_llama_dirs["single"])).columns


@pytest.mark.parametrize("bad", [[], [3, 3], [0.5], [2**31]])
def test_bad_offsets_are_refused(tiny_llama_dirs, bad):
    with pytest.raises(InputError):
        geo.score(str(tiny_llama_dirs["single"]), offsets=bad)


def test_frequencies_table(tiny_llama_dirs):
    df = geo.frequencies(str(tiny_llama_dirs["single"]))
    assert {"layer", "head", "pair", "theta", "wavelength", "energy_share", "symmetry"} <= set(df.columns)
    sums = df.groupby(["layer", "head"])["energy_share"].sum()
    np.testing.assert_allclose(sums.to_numpy(), 1.0, rtol=1e-9)
    one = df[(df["layer"] == 0) & (df["head"] == 0)]
    assert one["theta"].is_monotonic_decreasing and one["theta"].iloc[0] == pytest.approx(1.0)
    np.testing.assert_allclose(one["wavelength"], 2 * np.pi / one["theta"])


@pytest.mark.parametrize("params,needle", [
    (dict(rope_type="dynamic", factor=2.0, rope_theta=1e4), "trained length"),
    (dict(rope_type="longrope", rope_theta=1e4, original_max_position_embeddings=64, short_factor=[1.0] * 4,
          long_factor=[2.0] * 4), "short factors"),
])
def test_scaled_rope_types_say_how_they_are_scored(params, needle):
    transformers = pytest.importorskip("transformers")
    cls = transformers.LlamaConfig if params["rope_type"] == "dynamic" else transformers.Phi3Config
    cfg = cls(hidden_size=32, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2, intermediate_size=37,
              vocab_size=99, max_position_embeddings=256, pad_token_id=0, rope_parameters=params)
    model = getattr(transformers, cls.__name__.replace("Config", "Model"))(cfg)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        geo.score(model, offsets=[0, 3])
    notes = [str(w.message) for w in caught if issubclass(w.category, geo.PositionNote)]
    assert len(notes) == 1 and needle in notes[0]


def test_sliding_window_layers_flag_offsets_beyond_the_window():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Gemma3TextConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=1,
                                        head_dim=8, intermediate_size=37, vocab_size=99, sliding_window=8,
                                        layer_types=["sliding_attention", "full_attention"])  # fmt: skip
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        df = geo.score(transformers.Gemma3TextModel(cfg), offsets=[0, 7, 8, 100], levels=("layer",))
    beyond = df.set_index(["layer", "offset"])["beyond_window"]
    assert [beyond[(0, o)] for o in (0, 7, 8, 100)] == [False, False, True, True]
    assert beyond.loc[1].isna().all()  # the full-attention layer has no window
    assert any("beyond_window" in str(w.message) for w in caught)
