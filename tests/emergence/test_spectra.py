"""``emergence --spectra``: the effective ranks at every checkpoint equal ``geometry --spectra`` there, their
formation follows the same rule (its floor in dimensions), the figure and the CLI."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from attnscope.emergence import formation, sweep
from attnscope.errors import InputError
from attnscope.geometry import SPECTRA_COLUMNS, score
from tests.conftest import invoke_cli


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny symmetric-init encoder run (W_q = W_k: no routing part at step 0), checkpoints every 3 steps."""
    from attnscope.training import TrainConfig, train

    out = tmp_path_factory.mktemp("runs") / "enc-sym"
    train(TrainConfig(objective="mlm", init="symmetric", steps=12, checkpoint_every=3, score_every=3, warmup=2,
                      n_layers=2, d_model=32, d_ff=64, seq_len=16, batch_size=4, eval_windows=2, threads=1,
                      progress=False, lr=3e-3, out=str(out)))
    return out


def test_ranks_at_every_checkpoint_equal_geometry(run_dir, tmp_path):
    res = sweep(str(run_dir), tmp_path / "out", executor="inline", progress=False, spectra=True)
    assert "step-0" not in set(res.table["revision"])  # logged without spectra: left out, with a note
    assert any("logged without spectra" in n for n in res.info["notes"])
    assert res.info["spectra"] is True
    for rev, grp in res.table.groupby("revision", sort=False):
        ref = score(str(run_dir / "checkpoints" / rev), spectra=True)
        np.testing.assert_array_equal(grp[list(SPECTRA_COLUMNS)].to_numpy(float),
                                      ref[list(SPECTRA_COLUMNS)].to_numpy(float))
    with pytest.raises(InputError, match=r"spectra=True \(now None\)"):  # one store, one choice
        sweep(str(run_dir), tmp_path / "out", executor="inline", progress=False)


def _table(values: dict[str, list[float]]) -> pd.DataFrame:
    n = len(next(iter(values.values())))
    return pd.DataFrame({"model": "m", "stack": "decoder", "level": "head", "layer": 0, "head": 0,
                         "revision": [f"r{i}" for i in range(n)], "step": [10 * i for i in range(n)],
                         "tokens": [0] * n, **values})


def test_rank_formation_is_the_same_rule_in_dimensions():
    flat = [2.0] * 6
    t = _table({"symmetry": flat, "directionality": flat, "anti_rank": [2, 2, 2, 9, 9, 9], "sym_rank": [5, 5, 5, 5.3, 5.3, 5.3]})
    got = formation(t, metrics=("symmetry", "directionality", "anti_rank", "sym_rank")).set_index("metric")
    assert got.loc["anti_rank", "outcome"] == "formed" and got.loc["anti_rank", "formed_step"] == 30
    assert got.loc["sym_rank", "outcome"] == "below min_change"  # 0.3 < 0.5 dimensions
    assert got.loc["sym_rank", "margin"] == 0.5
    again = formation(t, metrics=("anti_rank", "sym_rank"), min_change={"sym_rank": 0.2}).set_index("metric")
    assert again.loc["sym_rank", "outcome"] == "formed"
    with pytest.raises(InputError, match="min_change names"):
        formation(t, metrics=("anti_rank",), min_change={"sym_rank": 0.2})


def test_cli_spectra_writes_ranks_formation_and_figure(run_dir, tmp_path, monkeypatch, capsys):
    out = tmp_path / "emerge"
    code, stdout, err = invoke_cli(monkeypatch, capsys, "emergence", run_dir, "--out", out, "--spectra",
                                   "--executor", "inline")
    assert code == 0, err
    formed = pd.read_csv(out / "formation.csv")
    assert {"anti_rank", "sym_rank"} <= set(formed["metric"])
    assert (formed.loc[formed["metric"] == "anti_rank", "margin"] >= 0.5).all()
    assert (out / "emergence_ranks.png").is_file()
    assert "anti_rank" in stdout
    table = pd.read_parquet(out / "emergence.parquet")
    assert table["anti_rank"].notna().all()
    manifest = json.loads((out / "attnscope-manifest.json").read_text())
    assert manifest  # one result


def test_min_change_rank_without_spectra_is_refused(run_dir, tmp_path, monkeypatch, capsys):
    code, _, err = invoke_cli(monkeypatch, capsys, "emergence", run_dir, "--out", tmp_path / "o", "--min-change-rank",
                              "2", "--executor", "inline")
    assert code == 2 and "--min-change-rank" in err and len(err.strip().splitlines()) == 1


def test_a_run_that_logged_spectra_keeps_step_0(tmp_path):
    """train --score-spectra logs the columns at step 0 too: the sweep keeps its step-0 revision, with ranks."""
    from attnscope.training import TrainConfig, train

    run = tmp_path / "enc"
    train(TrainConfig(objective="mlm", init="symmetric", steps=4, checkpoint_every=2, score_every=2, warmup=1,
                      n_layers=2, d_model=32, d_ff=64, seq_len=16, batch_size=4, eval_windows=2, threads=1,
                      progress=False, score_spectra=True, out=str(run)))
    res = sweep(str(run), tmp_path / "out", executor="inline", progress=False, spectra=True)
    at0 = res.table[res.table["revision"] == "step-0"]
    assert len(at0) and at0["anti_rank"].notna().all()
    heads = at0[at0["level"] == "head"]
    assert (heads["anti_rank"] == 0).all() and np.allclose(heads["sym_signature"], 1.0)  # W_q = W_k at step 0
    assert not res.info["notes"]
