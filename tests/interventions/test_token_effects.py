"""The change in loss at each text position (InterventionResult.token_effects, token_effects.parquet): its mean
over a window's positions is that window's loss delta on every route, 0 where nothing changes, kept by a resumed
run, written by the CLI with its section on the page."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "heads"))
sys.path.insert(0, str(Path(__file__).parent))
from _requires import skip_unless_bert_calls_the_interface  # noqa: E402
from _tiny_gguf import tiny_llama_model, write_llama_gguf_model  # noqa: E402

needs_gguf = pytest.mark.skipif(
    any(importlib.util.find_spec(n) is None for n in ("transformers", "accelerate", "gguf")),
    reason="needs transformers and the gguf extra (accelerate, gguf)",
)
SMALL = dict(windows=3, length=40, random_windows=0, exact="all")
COLUMNS = ["model", "layer", "head", "intervention", "window", "position", "token", "delta_loss"]


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory):
    root = tmp_path_factory.mktemp("token-effects")
    return write_llama_gguf_model(root / "tiny.gguf", tiny_llama_model(n_layers=2, d=32, n_heads=4, n_kv=2))


def _passes(path, kinds, precision: str, softcap: float | None = None):
    """(per-window rows, per-position rows) of layer 1's heads 0 and 2 on two text windows."""
    import torch

    from attnscope.heads.maps import make_windows
    from attnscope.interventions.attention import patched
    from attnscope.interventions.deltas import LowWeights
    from attnscope.interventions.run import clean_pass, layer_pass, open_subject

    subject = open_subject(str(path))
    subject.softcap = softcap  # a final logit softcap (Gemma 2) takes the plain per-position route
    wins = {"text": make_windows(subject.maps, "builtin", 2, 40)}
    low = LowWeights() if precision == "bf16-delta" else None
    with torch.inference_mode(), patched(subject.model) as ctl:
        clean = clean_pass(subject, wins, ctl, for_deltas=low is not None)
        return layer_pass(subject, 1, [0, 2], kinds, wins, clean, ctl, low, with_tokens=True)


@needs_gguf
@pytest.mark.parametrize("precision", ["full", "bf16-delta"])
@pytest.mark.parametrize("softcap", [None, 30.0])
def test_per_token_changes_average_to_each_windows_loss_delta(tiny_gguf, precision, softcap):
    rows, tokens = _passes(tiny_gguf, ("sym", "anti", "ablate", "mean"), precision, softcap)
    loss = rows[rows["measure"] == "loss"].set_index(["head", "intervention", "window"])["delta"].sort_index()
    assert tokens["delta_loss"].dtype == np.float32
    assert len(tokens) == len(loss) * 39  # every position but the first: 39 predictions per 40-token window
    assert set(tokens["position"]) == set(range(1, 40))
    mean = tokens.groupby(["head", "intervention", "window"])["delta_loss"].mean().sort_index()
    assert mean.index.equals(loss.index)
    # the window's delta is the mean of these terms; they are stored as float32 (relative rounding ~6e-8)
    scale = tokens["delta_loss"].abs().groupby([tokens["head"], tokens["intervention"], tokens["window"]]).max()
    np.testing.assert_array_less((mean - loss).abs(), 1e-6 * scale.sort_index() + 1e-12)
    assert (loss.abs() > 1e-4).any()  # the interventions did change the loss


@needs_gguf
@pytest.mark.parametrize("precision", ["full", "bf16-delta"])
def test_an_intervention_that_changes_nothing_has_every_per_token_change_0(tiny_gguf, precision):
    from attnscope.interventions.attention import CLEAN

    rows, tokens = _passes(tiny_gguf, (CLEAN,), precision)
    assert len(tokens) == 2 * 2 * 39 and (tokens["delta_loss"] == 0).all()
    assert (rows.loc[rows["measure"] == "loss", "delta"] == 0).all()


@needs_gguf
def test_the_result_holds_the_tokens_text_and_a_resumed_run_keeps_them(tiny_gguf, tmp_path):
    from attnscope.heads.maps import make_windows
    from attnscope.heads.tokens import token_texts
    from attnscope.interventions import intervene, open_subject
    from attnscope.interventions import run

    store = tmp_path / "store"
    first = intervene(str(tiny_gguf), interventions="sym,ablate", store=store, **SMALL)
    te = first.token_effects
    assert list(te.columns) == COLUMNS and len(te) == 2 * 4 * 3 * 3 * 39  # sym, its control scale:0.5, ablate
    assert set(te["model"]) == {first.table["model"].iloc[0]}
    subject = open_subject(str(tiny_gguf))
    ids = make_windows(subject.maps, "builtin", 3, 40)
    row = te.iloc[100]
    assert row["token"] == token_texts(subject.maps.tokenizer, ids[int(row["window"])].tolist())[int(row["position"])]
    # the table's mean change in loss is the mean over windows of the mean over positions
    loss = first.table[first.table["measure"] == "loss"].set_index(["layer", "head", "intervention"])["delta"]
    per_window = te.groupby(["layer", "head", "intervention", "window"])["delta_loss"].mean()
    got = per_window.groupby(["layer", "head", "intervention"]).mean()
    np.testing.assert_allclose(got.sort_index(), loss.reindex(got.index).sort_index(), rtol=1e-5, atol=1e-9)
    # resumed from the store: no layer computed again, the same per-token rows
    calls = []
    original = run.layer_pass
    run.layer_pass = lambda *a, **k: calls.append(1) or original(*a, **k)
    try:
        again = intervene(str(tiny_gguf), interventions="sym,ablate", store=store, **SMALL)
        assert not calls
        pd.testing.assert_frame_equal(again.token_effects, te)
        # a layer whose per-token rows are gone (a store tampered with, another run's files swapped in): that
        # layer is computed again, both its tables written anew; nothing is lost for good
        (next(store.rglob("tokens*layer=0*.parquet"))).unlink()
        again = intervene(str(tiny_gguf), interventions="sym,ablate", store=store, **SMALL)
        assert len(calls) == 1  # layer 0 alone
        pd.testing.assert_frame_equal(again.token_effects, te, rtol=1e-6)
        assert list(store.rglob("tokens*layer=0*.parquet"))
    finally:
        run.layer_pass = original


def test_an_encoder_has_no_token_table(minilm_dir):
    from attnscope.interventions import intervene

    skip_unless_bert_calls_the_interface()
    res = intervene(str(minilm_dir), interventions="ablate", heads=[(0, 1)], windows=2, length=16, random_windows=0)
    assert res.token_effects is None


@needs_gguf
def test_cli_writes_token_effects_parquet_and_the_pages_section(tiny_gguf, tmp_path, cli_inproc):
    out = tmp_path / "out"
    code, _, err = cli_inproc("atlas", str(tiny_gguf), "--out", str(out), "--windows", "2", "--length", "40",
                              "--random-windows", "2", "--random-length", "10", "--n-boot", "50",
                              "--interventions", "sym,anti", "--heads", "1.2,0.1", "--intervention-windows", "2")
    assert code == 0, err
    te = pd.read_parquet(out / "token_effects.parquet")
    assert list(te.columns) == COLUMNS
    assert set(zip(te["layer"], te["head"])) == {(1, 2), (0, 1)} and set(te["intervention"]) == {"sym", "anti", "scale:0.5"}
    iv = pd.read_parquet(out / "interventions.parquet")
    loss = iv[iv["measure"] == "loss"].set_index(["layer", "head", "intervention"])["delta"]
    got = te.groupby(["layer", "head", "intervention", "window"])["delta_loss"].mean().groupby(
        ["layer", "head", "intervention"]).mean()
    np.testing.assert_allclose(got.sort_index(), loss.reindex(got.index).sort_index(), rtol=1e-5, atol=1e-9)
    page = (out / "atlas.html").read_text()
    assert "What an intervention changes, per token" in page and 'id="atlas-te"' in page
