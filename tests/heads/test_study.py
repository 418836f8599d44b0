"""The dense-vs-sparse study at tiny size: it returns the tables (and writes only its run directories)."""

from __future__ import annotations

import math
import sys

import numpy as np
import pandas as pd
import pytest

from attnscope.errors import InputError
from attnscope.heads.study import run_study

TINY = dict(n_layers=1, d_model=32, d_ff=64, seq_len=32, max_seq_len=32, batch_size=2, steps=3, warmup=1,
            score_every=3, checkpoint_every=3, eval_windows=2, log_every=1)


def cli(monkeypatch, *args) -> int:
    """Run the real entry point in-process; its exit code."""
    from attnscope.cli import main

    monkeypatch.setattr(sys, "argv", ["attnscope", *map(str, args)])
    try:
        main()
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


@pytest.mark.slow
def test_tiny_study_returns_the_tables_and_the_cli_writes_them(tmp_path, monkeypatch):
    lines: list[str] = []
    res = run_study(tmp_path, pattern="local:8", windows=2, train_overrides=TINY, log=lines.append)
    summary, metrics, clusters = res["summary"], res["metrics"], res["clusters"]
    assert list(summary["variant"]) == ["dense", "sparse"]
    assert list(summary["attn_pattern"]) == ["dense", "local:8"]
    assert summary["params"].nunique() == 1 and (summary["steps"] == 3).all()  # they differ only in the pattern
    bpb = summary["heldout_bits_per_byte"].to_numpy(float)
    assert np.all(np.isfinite(bpb)) and np.all((bpb > 1) & (bpb < 10))  # ~8 bits per byte after 3 steps
    n_heads = int(metrics.groupby("model").size().iloc[0])
    assert sorted(metrics["model"].unique()) == ["dense", "sparse"] and len(metrics) == 2 * n_heads
    assert (metrics["layer"] == 0).all() and sorted(metrics.loc[metrics.model == "dense", "head"]) == list(range(n_heads))
    for col in ("entropy", "distance", "sparsity"):
        assert metrics[col].notna().all()
    # a head of the local:8 model cannot look further back than 7 positions
    assert metrics.loc[metrics.model == "sparse", "distance"].max() <= 7 + 1e-9
    assert set(clusters.best_k) == {"ward", "kmeans"}
    best = clusters.labels[clusters.labels["best"]]
    assert len(best) == 2 * len(metrics)  # every head of both models, once per method
    assert set(res["examples"]) == {"dense", "sparse"} and res["examples"]["dense"][0].shape[1:] == (32, 32)
    assert any("training dense" in line for line in lines)
    train_log = (tmp_path / "dense_train.log").read_text()  # progress there is plain lines: no bar codes
    assert "\x1b" not in train_log and "\r" not in train_log
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["dense", "dense_train.log", "dense_train_summary.json", "sparse", "sparse_train.log",
                       "sparse_train_summary.json"]  # no tables or figures: the CLI writes those
    again = run_study(tmp_path, pattern="local:8", windows=2, train_overrides=TINY)  # finished runs are reused
    assert math.isclose(again["summary"]["heldout_bits_per_byte"].iloc[0], bpb[0])

    # the CLI (reusing the finished runs) writes the tables and figures
    code = cli(monkeypatch, "heads", "study", tmp_path, "--pattern", "local:8", "--n-layers", "1", "--d-model", "32",
               "--seq-len", "32", "--windows", "2")
    assert code == 0
    assert pd.read_csv(tmp_path / "summary.csv")["heldout_bits_per_byte"].tolist() == pytest.approx(list(bpb))
    assert len(pd.read_csv(tmp_path / "heads_metrics.csv")) == len(metrics)
    assert len(pd.read_csv(tmp_path / "clusters.csv")) == len(clusters.labels)
    figs = sorted(p.name for p in (tmp_path / "figures").iterdir())
    assert figs == ["clusters_kmeans.png", "clusters_ward.png", "dense_heatmaps.png", "dense_maps.png", "scatter.png",
                    "silhouette.png", "sparse_heatmaps.png", "sparse_maps.png"]


def test_the_study_sets_the_pattern_itself(tmp_path):
    with pytest.raises(InputError, match="pass pattern"):
        run_study(tmp_path, train_overrides={"attn_pattern": "local:8"})


def test_the_study_follows_a_training_subprocess_by_its_logged_steps(tmp_path):
    from attnscope.heads.study import _trained_steps

    assert _trained_steps(tmp_path) == 0  # nothing logged yet
    (tmp_path / "metrics.jsonl").write_text('{"step": 0, "loss": 5.5}\n{"step": 10, "loss": 4.1}\n{"step": 2')
    assert _trained_steps(tmp_path) == 10  # a line being written is not read as a step
