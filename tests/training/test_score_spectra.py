"""train --score-spectra: metrics.jsonl's geometry records carry the spectral columns, equal to
``attnscope geometry --spectra`` on the checkpoint of the same step; without it they are as before."""

from __future__ import annotations

import json
import math

import pytest

from attnscope.geometry import SPECTRA_COLUMNS, score


@pytest.mark.parametrize("objective", ["clm"])
def test_logged_spectra_equal_geometry_on_the_checkpoint(tmp_path, objective):
    from attnscope.training import TrainConfig, train

    run = tmp_path / "run"
    train(TrainConfig(objective=objective, steps=4, checkpoint_every=4, score_every=4, warmup=1, n_layers=2,
                      d_model=32, d_ff=64, seq_len=16, batch_size=4, eval_windows=2, threads=1, progress=False,
                      n_kv_heads=2, score_spectra=True, out=str(run)))
    lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    logged = next(x for x in lines if x["step"] == 4)["geometry"]
    ref = score(str(run / "checkpoints" / "step-4"), spectra=True)
    assert len(logged) == len(ref)
    for rec, (_, row) in zip(logged, ref.iterrows()):
        assert (rec["layer"], rec["head"]) == (row["layer"], None if row["level"] == "layer" else row["head"])
        for col in SPECTRA_COLUMNS:  # host copies of the same float32 factors, the same kernel
            assert math.isclose(rec[col], row[col], rel_tol=1e-6, abs_tol=1e-9), col


def test_without_the_option_the_records_are_as_before(tmp_path):
    from attnscope.training import TrainConfig, train

    run = tmp_path / "run"
    train(TrainConfig(objective="mlm", steps=2, checkpoint_every=2, score_every=2, warmup=1, n_layers=1, d_model=32,
                      d_ff=64, seq_len=16, batch_size=4, eval_windows=2, threads=1, progress=False, out=str(run)))
    first = json.loads((run / "metrics.jsonl").read_text().splitlines()[0])["geometry"][0]
    assert not set(SPECTRA_COLUMNS) & set(first)
