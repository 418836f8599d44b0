"""Behaviour over training: the probes at each checkpoint equal the atlas's own, and the settling correlation."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from attnscope.emergence import sweep
from attnscope.emergence.behaviour import behaviour_options, settling
from attnscope.errors import InputError


def _table(beh_steps, geo_steps, steps=(0, 10, 100, 1000, 10000)):
    """Heads whose s jumps from 0 to 1 at ``geo_steps[h]`` and whose induction jumps at ``beh_steps[h]``."""
    rows = []
    for step in steps:
        for h, (g, b) in enumerate(zip(geo_steps, beh_steps)):
            rows.append({"model": "m", "revision": f"step{step}", "step": step, "tokens": None, "stack": "decoder",
                         "level": "head", "layer": h // 4, "head": h % 4, "symmetry": float(step >= g),
                         "directionality": 0.0, "induction_random": float(step >= b)})
    return pd.DataFrame(rows)


def test_settling_is_one_when_behaviour_forms_with_geometry():
    rng = np.random.default_rng(0)
    at = rng.choice([10, 100, 1000, 10000], size=40)
    corr = settling(_table(at, at), n_boot=300).set_index(["x", "y"])
    row = corr.loc[("symmetry", "induction_random")]
    assert row["rho"] == pytest.approx(1.0) and row["ci_low"] > 0.9 and row["relation"] == "positive"
    assert row["n"] == 40
    assert np.isnan(corr.loc[("directionality", "induction_random"), "rho"])  # d never forms


def test_settling_interval_includes_zero_on_noise():
    rng = np.random.default_rng(1)
    geo, beh = rng.choice([10, 100, 1000, 10000], size=(2, 60))
    row = settling(_table(beh, geo), n_boot=500).set_index(["x", "y"]).loc[("symmetry", "induction_random")]
    assert row["ci_low"] < 0 < row["ci_high"]


def test_settling_needs_behaviour_columns():
    with pytest.raises(InputError, match="no behaviour columns"):
        settling(_table([10], [10]).drop(columns="induction_random"))


def test_options_are_checked_before_any_work():
    assert behaviour_options()["probes"] == ["random", "text"]
    for bad, match in (({"windows": 0}, "windows"), ({"probes": "nope"}, "probes"), ({"depth": 3}, "unknown")):
        with pytest.raises(InputError, match=match):
            behaviour_options(**bad)


def test_probes_at_each_checkpoint_equal_the_probes_run_alone(tmp_path):
    from attnscope.heads.probes import run_probes
    from attnscope.training import TrainConfig, train

    run = tmp_path / "dec"
    train(TrainConfig(objective="clm", steps=6, checkpoint_every=3, score_every=3, warmup=1, n_layers=2, d_model=32,
                      d_ff=64, seq_len=16, batch_size=4, eval_windows=2, threads=1, progress=False, out=str(run)))
    res = sweep(str(run), tmp_path / "out", executor="inline", progress=False,
                behaviour={"probes": "random", "random_windows": 1})
    heads = res.table[res.table["level"] == "head"]
    assert heads.loc[heads["revision"] == "step-0", "induction_random"].isna().all()  # the logged step: no weights
    for rev in ("step-3", "step-6"):
        ref = run_probes(str(run / "checkpoints" / rev), "random", random_windows_n=1).sort_values(["layer", "head"])
        got = heads[heads["revision"] == rev].sort_values(["layer", "head"])
        np.testing.assert_allclose(got["previous_token_random"].to_numpy(float), ref["previous_token"].to_numpy(float))
    assert res.table.loc[res.table["level"] == "layer", "induction_random"].isna().all()


def test_settling_flags_intervals_from_few_layers_and_is_reproducible():
    rng = np.random.default_rng(3)
    at = rng.choice([10, 100, 1000, 10000], size=8)  # 8 heads: 2 layers of 4
    corr = settling(_table(at, at), n_boot=300).set_index(["x", "y"])
    row = corr.loc[("symmetry", "induction_random")]
    assert row["n_units"] == 2 and bool(row["few_units"])  # rho 1.0 [1.0, 1.0] from 2 layers: flagged
    wide = settling(_table(at.repeat(3), at.repeat(3)), n_boot=300).set_index(["x", "y"])  # 24 heads, 6 layers
    assert wide.loc[("symmetry", "induction_random"), "n_units"] == 6
    assert not wide.loc[("symmetry", "induction_random"), "few_units"]
    geo, beh = rng.choice([10, 100, 1000, 10000], size=(2, 40))
    again = [settling(_table(beh, geo), n_boot=300, seed=5) for _ in range(2)]
    pd.testing.assert_frame_equal(again[0], again[1])  # seeded: the same call, the same interval


def test_settling_interval_covers_zero_on_pure_noise_in_most_draws():
    """Unrelated formation steps over 10 layers: the 95% interval includes 0 in (nearly) every draw."""
    covered = []
    for draw in range(12):
        rng = np.random.default_rng(100 + draw)
        geo, beh = rng.choice([10, 100, 1000, 10000], size=(2, 40))
        row = settling(_table(beh, geo), n_boot=150).set_index(["x", "y"]).loc[("symmetry", "induction_random")]
        covered.append(row["ci_low"] <= 0 <= row["ci_high"])
    assert np.mean(covered) >= 0.85
