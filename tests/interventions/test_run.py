"""intervene() end to end on a tiny llama written as GGUF: table, API = CLI, resume per layer; the statistics."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parents[1] / "heads"))
from _tiny_gguf import tiny_llama_model, write_llama_gguf_model  # noqa: E402

needs_gguf = pytest.mark.skipif(
    any(importlib.util.find_spec(n) is None for n in ("transformers", "accelerate", "gguf")),
    reason="needs transformers and the gguf extra (accelerate, gguf)",
)
SMALL = dict(windows=3, length=40, random_windows=2, random_length=10, exact="all")


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    root = tmp_path_factory.mktemp("interventions")
    return write_llama_gguf_model(root / "tiny.gguf", tiny_llama_model(n_layers=2, d=32, n_heads=4, n_kv=2))


@needs_gguf
def test_table_has_every_head_intervention_and_measure(tiny_gguf):
    from attnscope.interventions import intervene

    res = intervene(str(tiny_gguf), interventions="sym,anti,ablate,mean", **SMALL)
    t = res.table
    loss = t[t["measure"] == "loss"]
    assert len(loss) == 2 * 4 * 5 and loss["n"].eq(3).all()  # 4 interventions + the scale:0.5 control of sym/anti
    assert np.isfinite(loss["delta"]).all() and (loss["delta"].abs() > 0).any()
    assert loss["clean"].nunique() == 1  # one clean loss, the model's own
    beh = t[t["measure"] != "loss"]
    assert set(beh["intervention"]) == {"sym", "anti", "scale:0.5"}  # an output intervention leaves the map alone
    assert {"induction_random", "previous_token_text", "sink_random", "entropy_norm_text"} <= set(beh["measure"])
    np.testing.assert_allclose(t["value"] - t["clean"], t["delta"], atol=1e-9)
    assert ((t["ci_low"] <= t["delta"]) & (t["delta"] <= t["ci_high"])).all()
    assert (t["p_bh"] >= t["p"] - 1e-12).all() and t["interval"].str.contains("95% t interval").all()
    assert res.info["loss"].startswith("mean next-token cross-entropy")


@needs_gguf
def test_clean_behaviour_is_the_atlas_measurement(tiny_gguf):
    """The clean behaviour the deltas start from is what the atlas measures on the same windows."""
    from attnscope.heads.probes import run_probes
    from attnscope.interventions import intervene

    res = intervene(str(tiny_gguf), interventions="sym", data="builtin", **SMALL)  # the atlas's text
    beh = run_probes(str(tiny_gguf), windows=3, length=40, random_windows_n=2, random_length=10)
    t = res.table
    for probe in ("random", "text"):
        ref = beh[beh["probe"] == probe].set_index(["layer", "head"])["previous_token"]
        got = t[(t["measure"] == f"previous_token_{probe}") & (t["intervention"] == "sym")].set_index(
            ["layer", "head"])["clean"]
        np.testing.assert_allclose(got.sort_index(), ref.sort_index(), rtol=1e-5, atol=1e-6)


@needs_gguf
def test_api_and_cli_give_the_same_head_and_a_run_resumes_per_layer(tiny_gguf, tmp_path, monkeypatch, cli_inproc):
    from attnscope.interventions import intervene, run

    api = intervene(str(tiny_gguf), interventions="sym,ablate", heads=[(1, 2)], **{**SMALL, "random_windows": 3}).table
    out = tmp_path / "out"
    args = ["atlas", str(tiny_gguf), "--out", str(out), "--windows", "2", "--length", "40", "--random-windows", "2",
            "--random-length", "10", "--n-boot", "50", "--interventions", "sym,ablate", "--heads", "1.2",
            "--intervention-windows", "3"]
    code, _, err = cli_inproc(*args)
    assert code == 0, err
    assert "heads that need their antisymmetric (directional) part" in err
    cli = pd.read_parquet(out / "interventions.parquet")
    assert set(zip(cli["layer"], cli["head"])) == {(1, 2)}
    assert "symmetry" in cli.columns and "previous_token_random" in cli.columns  # joined to the atlas row
    key = ["intervention", "measure"]
    a, c = api.set_index(key).sort_index(), cli.set_index(key).sort_index()
    np.testing.assert_allclose(c["delta"], a["delta"], rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(c["ci_high"], a["ci_high"], rtol=1e-6, atol=1e-9)
    page = (out / "atlas.html").read_text()
    assert "Heads whose behaviour collapses under sym" in page and "antisymmetric part" in page
    # a second run reuses the stored layer: the layer pass is not called again
    monkeypatch.setattr(run, "layer_pass", lambda *a, **k: (_ for _ in ()).throw(AssertionError("recomputed")))
    code, _, err = cli_inproc(*args)
    assert code == 0, err
    np.testing.assert_allclose(pd.read_parquet(out / "interventions.parquet")["delta"], cli["delta"])


@needs_gguf
@pytest.mark.parametrize("argv, message", [
    (["--interventions", "flip"], "interventions must be among"),
    (["--interventions", "sym", "--heads", "1-2"], "LAYER.HEAD"),
    (["--interventions", "sym", "--top", "ten"], "K:COLUMN"),
    (["--heads", "1.2"], "give --interventions too"),
    (["--intervention-precision", "full"], "give --interventions too"),
    (["--interventions", "sym", "--intervention-precision", "half"], "--intervention-precision must be one of"),
    (["--interventions", "sym", "--heads", "1.2", "--top", "3:sink_random"], "not both"),
])
def test_bad_options_are_one_line_before_any_work(tiny_gguf, tmp_path, argv, message, cli_inproc):
    code, _, err = cli_inproc("atlas", str(tiny_gguf), "--out", str(tmp_path / "o"), *argv)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "o" / "atlas.parquet").exists()


@needs_gguf
def test_a_head_outside_the_model_is_refused(tiny_gguf):
    from attnscope.errors import InputError
    from attnscope.interventions import intervene

    with pytest.raises(InputError, match=r"head 2.0 is not in the model \(layers 0-1, each with head 0-3\)"):
        intervene(str(tiny_gguf), heads=[(2, 0)], **SMALL)


# --------------------------------------------------------------------------- statistics


def test_interval_is_zero_on_identical_inputs_and_covers_zero_on_noise():
    from attnscope.interventions import t_interval

    assert t_interval(np.zeros(4)) == (0.0, 0.0, 0.0, 1.0, 4)
    rng = np.random.default_rng(0)
    covered = [lo <= 0 <= hi for lo, hi in (t_interval(rng.normal(size=6))[1:3] for _ in range(400))]
    assert 0.92 <= np.mean(covered) <= 0.98  # a 95% interval on pure noise
    mean, lo, hi, p, n = t_interval(np.array([1.0, 1.2, 0.9, 1.1, np.nan]))
    assert n == 4 and lo > 0 and p < 0.01 and mean == pytest.approx(1.05)
    assert np.isnan(t_interval(np.array([0.5]))[1])  # one window: no interval


def _bh_reference(p):
    """Slow Benjamini-Hochberg: q_i = min over j with p_j >= p_i of p_j m / rank_j."""
    p = np.asarray(p, float)
    m = len(p)
    ranks = np.argsort(np.argsort(p, kind="stable"), kind="stable") + 1
    return np.array([min(min(p[j] * m / ranks[j] for j in range(m) if ranks[j] >= ranks[i]), 1.0) for i in range(m)])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 1), min_size=1, max_size=30))
def test_bh_adjust_matches_the_slow_reference(p):
    from attnscope.atlas.stats import bh_adjust

    q = bh_adjust(p)
    np.testing.assert_allclose(q, _bh_reference(p), rtol=1e-12, atol=1e-15)
    assert np.all(q >= np.asarray(p) - 1e-15) and np.all(q <= 1)


def test_bh_adjust_keeps_nan_and_refuses_bad_p():
    from attnscope.atlas.stats import bh_adjust
    from attnscope.errors import InputError

    q = bh_adjust([0.01, np.nan, 0.04, 0.03])
    assert np.isnan(q[1]) and q[[0, 2, 3]] == pytest.approx([0.03, 0.04, 0.04])
    with pytest.raises(InputError):
        bh_adjust([0.5, 1.5])


def _sym_rows(cases, intervention="sym"):
    return [dict(layer=0, head=head, intervention=intervention, measure="previous_token_random", n=4, clean=clean,
                 value=value, delta=value - clean, ci_low=value - clean - 0.1, ci_high=value - clean + 0.1, p=p)
            for head, (clean, value, p) in enumerate(cases)]


def test_sym_collapse_names_only_strong_heads_that_collapse_and_where_the_behaviour_lives():
    from attnscope.interventions import add_bh, needs_direction, sym_collapse

    sym = [(0.8, 0.1, 1e-6), (0.8, 0.7, 1e-6), (0.1, 0.0, 1e-6), (0.8, 0.1, 0.5), (0.9, 0.05, 1e-6)]
    only_sym = add_bh(pd.DataFrame(_sym_rows(sym)))
    hit = sym_collapse(only_sym)
    assert hit["head"].tolist() == [4, 0] and set(hit["lives_in"]) == {"unknown (anti not run)"}
    assert needs_direction(only_sym).empty  # without anti, nothing is claimed for the direction
    # head 0 keeps its behaviour under anti; head 4 loses it there too; without the scale control (no
    # vs_control columns: a table of an older attnscope) neither is claimed, each says why
    anti = [(0.8, 0.75, 0.3), (0.8, 0.8, 1), (0.1, 0.1, 1), (0.8, 0.8, 1), (0.9, 0.1, 1e-6)]
    both = add_bh(pd.DataFrame(_sym_rows(sym) + _sym_rows(anti, "anti")))
    hit = sym_collapse(both).set_index("head")
    assert hit.loc[0, "lives_in"].startswith("undecided: no scale:0.5 control run")
    assert hit.loc[4, "lives_in"].startswith("undecided: no scale:0.5 control run")
    assert hit.loc[4, "anti_value"] == pytest.approx(0.1)
    assert needs_direction(both).empty  # (tests/interventions/test_claims.py: the decisions with the control)


def test_detectable_change_is_the_t_test_at_80_percent_power_and_windows_needed_inverts_it():
    from scipy import stats

    from attnscope.interventions.summary import detectable_change, summarise, windows_needed

    sd, n = 0.02, 6
    slow = (stats.t.ppf(0.975, n - 1) + stats.t.ppf(0.8, n - 1)) * sd / np.sqrt(n)
    assert detectable_change(sd, n) == pytest.approx(slow)
    assert np.isnan(detectable_change(sd, 1)) and detectable_change(0.0, 5) == 0
    # a simulated true change of that size is found (p < 0.05) in about 80% of runs
    rng = np.random.default_rng(0)
    x = rng.normal(slow, sd, size=(4000, n))
    p = stats.ttest_1samp(x, 0, axis=1).pvalue
    assert 0.76 < (p < 0.05).mean() < 0.84
    need = windows_needed(sd, 0.01)
    assert detectable_change(sd, need) <= 0.01 < detectable_change(sd, need - 1)
    raw = pd.DataFrame(dict(layer=0, head=0, intervention="sym", measure="loss", window=range(4), clean=1.0,
                            value=[1.1, 1.2, 1.1, 1.3], delta=[0.1, 0.2, 0.1, 0.3]))
    row = summarise(raw).iloc[0]
    assert row["sd"] == pytest.approx(np.std([0.1, 0.2, 0.1, 0.3], ddof=1))
    assert row["detectable_change"] == pytest.approx(detectable_change(row["sd"], 4))


def test_top_takes_the_highest_or_with_a_minus_the_lowest():
    from attnscope.errors import InputError
    from attnscope.interventions.summary import parse_top, top_heads

    table = pd.DataFrame(dict(model="m", layer=[0, 0, 1, 1], head=[0, 1, 0, 1], d=[0.3, -0.5, 0.1, -0.2]))
    assert top_heads(table, parse_top("2:d")) == [(0, 0), (1, 0)]
    assert top_heads(table, parse_top("2:-d")) == [(0, 1), (1, 1)]
    assert top_heads(table, parse_top([(1, "-d"), (2, "-d")])) == [(0, 1), (1, 1)]
    for bad in ("0:d", "x:d", "2:", "²:d", "2"):
        with pytest.raises(InputError, match="K:COLUMN"):
            parse_top(bad)
    with pytest.raises(InputError, match="no column 'e'"):
        top_heads(table, parse_top("1:-e"))


def test_a_bert_that_picks_its_own_attention_class_is_refused_in_one_line(minilm_dir):
    """transformers < 5: BERT's layers never call the attention interface, so no head could be intervened on; the
    run stops at the first clean window with one sentence naming the release, never returning unchanged numbers."""
    import transformers
    import transformers.models.bert.modeling_bert as bert

    from attnscope.errors import UnsupportedError
    from attnscope.interventions import intervene

    if hasattr(bert, "ALL_ATTENTION_FUNCTIONS"):
        pytest.skip(f"transformers {transformers.__version__}'s BERT calls the attention interface (the runs are tested)")
    with pytest.raises(UnsupportedError) as err:
        intervene(str(minilm_dir), interventions="ablate", heads=[(0, 1)], windows=1, length=16, random_windows=0)
    msg = str(err.value)
    assert "\n" not in msg and "only 0 of 6 layers call transformers' attention interface" in msg
    assert f"transformers {transformers.__version__}" in msg and "from transformers 5.0" in msg


def test_an_hf_directory_and_the_same_model_in_memory_agree(tmp_path, minilm_dir):
    """A decoder directory is loaded with its LM head (the loss); the loaded model with tokenizer= gives the same."""
    import shutil

    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from attnscope.interventions import intervene

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=30522, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).eval()
    model.save_pretrained(tmp_path / "m")
    for name in ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json"):
        if (minilm_dir / name).is_file():
            shutil.copy(minilm_dir / name, tmp_path / "m" / name)
    opts = dict(interventions="sym,mean", heads=[(1, 3)], windows=2, length=32, random_windows=0)
    from_dir = intervene(str(tmp_path / "m"), **opts).table
    in_memory = intervene(model, tokenizer=AutoTokenizer.from_pretrained(minilm_dir), name=str(tmp_path / "m"), **opts).table
    loss = from_dir[from_dir["measure"] == "loss"]
    assert len(loss) == 3 and np.isfinite(loss["delta"]).all() and loss["clean"].between(9, 12).all()  # ~ln 30522
    assert set(loss["intervention"]) == {"sym", "mean", "scale:0.5"}  # sym's control beside it
    key = ["intervention", "measure"]
    np.testing.assert_allclose(from_dir.set_index(key).sort_index()["delta"],
                               in_memory.set_index(key).sort_index()["delta"], rtol=1e-5, atol=1e-7)


@needs_gguf
@pytest.mark.parametrize("precision", ["full", "bf16-delta"])
def test_skipping_the_layers_before_from_kept_outputs_changes_nothing(tiny_gguf, precision):
    """The clean pass keeps every layer's output; an intervention forward then skips the layers before its
    layer. The same deltas as computing them again (what happens past the memory budget)."""
    import dataclasses

    import torch

    from attnscope.heads.maps import make_windows
    from attnscope.heads.probes import random_windows
    from attnscope.interventions.attention import patched
    from attnscope.interventions.deltas import LowWeights
    from attnscope.interventions.run import clean_pass, layer_pass, open_subject

    subject = open_subject(str(tiny_gguf))
    wins = {"text": make_windows(subject.maps, "builtin", 2, 40), "random": random_windows(subject.maps, 2, 10, seed=0)}
    low = LowWeights() if precision == "bf16-delta" else None
    ticks: dict[str, list[float]] = {"clean": [], "kept": [], "again": []}
    with torch.inference_mode(), patched(subject.model) as ctl:
        clean = clean_pass(subject, wins, ctl, tick=lambda: ticks["clean"].append(1.0))
        assert clean.outputs is not None and all(o is not None for o in clean.outputs["text"][1])
        kept = layer_pass(subject, 1, [0, 1, 2, 3], ("sym", "anti", "ablate"), wins, clean, ctl, low,
                          tick=ticks["kept"].append)
        again = layer_pass(subject, 1, [0, 1, 2, 3], ("sym", "anti", "ablate"), wins,
                           dataclasses.replace(clean, outputs=None), ctl, low, tick=ticks["again"].append)
    assert len(kept) == len(again) > 0
    assert len(ticks["clean"]) == 4  # one per window
    for name in ("kept", "again"):  # how far the pass is: after each layer and each copy's loss, up to 1
        f = ticks[name]
        assert len(f) > 8 and f == sorted(f) and f[-1] == pytest.approx(1.0) and 0 < f[0] < 0.5
    # the kept prefix is the clean pass's (eager attention), the recomputed one SDPA's: ~1e-7 apart, which
    # bf16-delta's rounding (~2^-8 of each effect) may carry into a delta
    rtol = 1e-4 if precision == "full" else 1e-2
    np.testing.assert_allclose(kept["delta"], again["delta"], rtol=rtol, atol=1e-6)
    assert (kept["delta"] != 0).any()


def test_the_clean_pass_keeps_outputs_only_within_its_budget(tiny_gguf, monkeypatch):
    import torch

    from attnscope.heads.maps import make_windows
    from attnscope.interventions import clean, run
    from attnscope.interventions.attention import patched

    subject = run.open_subject(str(tiny_gguf))
    wins = {"text": make_windows(subject.maps, "builtin", 2, 40)}
    monkeypatch.setattr(clean, "PREFIX_BUDGET", 2 * 40 * 32 * 2 * 4 - 1)  # windows x positions x hidden x layers x 4 B
    with torch.inference_mode(), patched(subject.model) as ctl:
        assert run.clean_pass(subject, wins, ctl).outputs is None


@needs_gguf
def test_one_load_serves_the_atlas_and_the_interventions_and_intervene_joins_the_atlas(tiny_gguf, monkeypatch):
    import attnscope
    from attnscope.interventions import intervene, open_subject

    ref = attnscope.atlas(str(tiny_gguf), windows=2, length=40, random_windows=2, random_length=10, n_boot=50)
    subject = open_subject(str(tiny_gguf))
    res = attnscope.atlas(subject.maps, windows=2, length=40, random_windows=2, random_length=10, n_boot=50)
    cols = [c for c in ref.table.columns if c != "source"]
    pd.testing.assert_frame_equal(res.table[cols], ref.table[cols])  # the same atlas from the shared load
    from attnscope.interventions import subject as subject_mod

    monkeypatch.setattr(subject_mod, "_load", lambda *a, **k: (_ for _ in ()).throw(AssertionError("loaded again")))
    iv = intervene(subject, atlas=res, top="2:-directionality", interventions="sym", **SMALL).table
    lowest = res.table.nsmallest(2, "directionality")
    assert set(zip(iv["layer"], iv["head"])) == set(zip(lowest["layer"], lowest["head"]))
    assert {"symmetry", "directionality", "previous_token_random", "cluster"} <= set(iv.columns)  # joined
    assert iv["model"].eq(res.info["model"]).all()
    row = iv.iloc[0]
    atlas_row = res.table[(res.table["layer"] == row["layer"]) & (res.table["head"] == row["head"])].iloc[0]
    assert row["directionality"] == atlas_row["directionality"]
    assert {"sd", "detectable_change"} <= set(iv.columns) and (iv["detectable_change"].dropna() >= 0).all()


@needs_gguf
def test_cli_loads_the_model_once_and_takes_the_lowest_with_a_minus(tiny_gguf, tmp_path, monkeypatch, cli_inproc):
    from attnscope.heads import maps
    from attnscope.interventions import subject as subject_mod

    loads = []
    real = subject_mod._load
    monkeypatch.setattr(subject_mod, "_load", lambda *a, **k: loads.append(a) or real(*a, **k))
    monkeypatch.setattr(maps, "open_model", lambda *a, **k: (_ for _ in ()).throw(AssertionError("a second load")))
    out = tmp_path / "o"
    code, _, err = cli_inproc("atlas", str(tiny_gguf), "--out", str(out), "--windows", "2", "--length", "40",
                              "--random-windows", "2", "--random-length", "10", "--n-boot", "50",
                              "--interventions", "sym,anti", "--top", "3:-directionality", "--intervention-windows", "3")
    assert code == 0, err
    assert len(loads) == 1  # was: twice (the atlas's load, then the interventions')
    atlas = pd.read_parquet(out / "atlas.parquet")
    iv = pd.read_parquet(out / "interventions.parquet")
    lowest = atlas.nsmallest(3, "directionality")
    assert set(zip(iv["layer"], iv["head"])) == set(zip(lowest["layer"], lowest["head"]))
    assert "interventions: 3 heads, each under sym, anti, scale:0.5 on 3 windows" in err
    assert "largest changes in loss: L" in err and "detectable" in err


@settings(max_examples=25, deadline=None)
@given(c=st.integers(2, 5), i=st.integers(2, 9), v=st.integers(2, 60), scale=st.sampled_from([1e-4, 1.0, 30.0, 400.0]),
       seed=st.integers(0, 2**16))
def test_full_precision_loss_changes_are_each_copys_cross_entropy_minus_the_clean_ones(c, i, v, scale, seed):
    """The one-pass route (exp of the logits shifted by the clean maximum) against the plain cross-entropy
    in float64, a copy equal to the clean one exactly 0; logits out of exp's range take the plain route."""
    from types import SimpleNamespace

    import torch

    from attnscope.interventions.loss import loss_terms

    g = torch.Generator().manual_seed(seed)
    e = 8
    subject = SimpleNamespace(out_weight=torch.randn(v, e, generator=g), softcap=None)
    h0 = torch.randn(1, i, e, generator=g)
    hidden = torch.cat([h0, h0 + scale * torch.randn(c - 1, i, e, generator=g) / e])  # [c, i, e]
    hidden[-1] = h0[0]  # the last copy changes nothing
    idx = torch.randint(0, v, (1, i), generator=g)
    ticks = []
    got = loss_terms(subject, hidden, idx, tick=lambda: ticks.append(1)).mean(1)
    logits = hidden.double()[:, :-1] @ subject.out_weight.double().T  # [c, i - 1, v]
    ce = [float(torch.nn.functional.cross_entropy(z, idx[0, 1:])) for z in logits]
    ref = np.array(ce[1:]) - ce[0]
    size = max(1.0, float(logits.abs().max()))  # float32's rounding scales with the logits
    np.testing.assert_allclose(got, ref, rtol=0, atol=2e-6 * size)
    assert got[-1] == 0.0 and len(ticks) == c - 1
