"""Training with --score-offsets: the logged rotary-form scores equal attnscope geometry --offsets on the checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from attnscope.errors import ConfigError
from attnscope.training.trainer import TrainConfig, list_checkpoints, train

TINY = dict(n_layers=2, n_heads=4, d_model=32, d_ff=64, batch_size=4, seq_len=32, eval_windows=8, progress=False,
            threads=1)


def test_logged_offset_scores_equal_the_checkpoint(tmp_path: Path) -> None:
    from attnscope.geometry import score

    cfg = TrainConfig.from_sources(None, **TINY, out=str(tmp_path / "run"), objective="clm", pos="rotary",
                                   init="symmetric", steps=4, warmup=1, score_every=4, checkpoint_every=4,
                                   score_offsets="0,1,16,-3", n_kv_heads=2)
    train(cfg)
    recs = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    first = pd.DataFrame(next(r for r in recs if r["step"] == 0)["geometry_offsets"])
    sym0 = first[(first["offset"] == 0) & (first["level"] == "head")]["symmetry"]
    assert (sym0 > 1 - 1e-5).all()  # a symmetric init is symmetric at offset 0 ...
    assert (first[first["offset"] == 16]["symmetry"] < 0.999).any()  # ... and rotation breaks it
    (step, ckpt), = list_checkpoints(tmp_path / "run")
    logged = pd.DataFrame(next(r for r in recs if r["step"] == step)["geometry_offsets"])
    logged["head"] = pd.array(logged["head"].tolist(), dtype="Int64")
    fresh = score(str(ckpt), offsets=[0, 1, 16, -3])
    cols = ["stack", "level", "layer", "head", "offset", "symmetry", "directionality", "frobenius_norm"]
    pd.testing.assert_frame_equal(logged[cols].reset_index(drop=True), fresh[cols].reset_index(drop=True),
                                  check_dtype=False, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kw,needle", [(dict(score_offsets="0,1"), "rotary"),
                                       (dict(score_offsets="1,1", pos="rotary"), "repeats")])
def test_bad_score_offsets(tmp_path: Path, kw, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        TrainConfig.from_sources(None, **TINY, out=str(tmp_path / "r"), **kw)
