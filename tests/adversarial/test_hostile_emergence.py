"""A hostile user of ``attnscope emergence`` (issue 39): a sweep is one model, workers within the CPUs, stacks,
non-UTF-8 folder names, each refused (or capped) before any revision is scored, from the CLI and from Python."""

from __future__ import annotations

import os
import shutil
import sys

import pandas as pd
import pytest

from attnscope.emergence import sweep
from attnscope.errors import AttnscopeWarning, InputError

TINY = dict(objective="mlm", warmup=1, d_ff=64, seq_len=16, batch_size=4, eval_windows=2, threads=1, progress=False)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """(a tiny run with checkpoints at 3 and 6, the same run with a step-9 of another width and head count)."""
    from attnscope.training import TrainConfig, train

    root = tmp_path_factory.mktemp("hostile-emergence")
    one = root / "one"
    train(TrainConfig(steps=6, checkpoint_every=3, score_every=3, n_layers=2, d_model=32, out=str(one), **TINY))
    other = root / "other"
    train(TrainConfig(steps=3, checkpoint_every=3, score_every=3, n_layers=2, d_model=48, n_heads=2, out=str(other),
                      **TINY))
    mixed = root / "mixed"
    shutil.copytree(one, mixed)
    shutil.copytree(other / "checkpoints" / "step-3", mixed / "checkpoints" / "step-9")
    return one, mixed


def _no_store(out):
    """Nothing was scored: no result in the store."""
    return not (out / "store").exists() or not any((out / "store").rglob("*.parquet"))


def test_another_model_mid_sweep_is_refused_in_one_line(runs, tmp_path, cli_inproc):
    _, mixed = runs
    out = tmp_path / "o"
    code, _, err = cli_inproc("emergence", str(mixed), "--out", str(out), "--executor", "inline")
    assert code == 2 and err.strip().count("\n") == 0, err
    assert "step-9" in err and "width 48 vs 32" in err and "heads 2 vs 4" in err and "--skip-mismatched" in err
    assert _no_store(out)
    with pytest.raises(InputError, match="revision step-9 is another model than step-3 .*width 48 vs 32"):
        sweep(str(mixed), tmp_path / "p", executor="inline", progress=False)
    assert _no_store(tmp_path / "p")


def test_skip_mismatched_leaves_it_out_with_one_warning_and_a_record(runs, tmp_path, cli_inproc):
    _, mixed = runs
    out = tmp_path / "o"
    code, _, err = cli_inproc("emergence", str(mixed), "--out", str(out), "--executor", "inline", "--skip-mismatched")
    assert code == 0, err
    warned = [ln for ln in err.splitlines() if "warning" in ln]
    assert len(warned) == 1 and "step-9 (width 48 vs 32" in warned[0], err
    revs = pd.read_csv(out / "revisions.csv").set_index("revision")
    assert revs.loc["step-9", "status"] == "skipped" and "width 48 vs 32" in revs.loc["step-9", "error"]
    assert "step-9" not in set(pd.read_csv(out / "emergence.csv")["revision"])
    with pytest.warns(AttnscopeWarning, match="skipped 1 revision"):
        res = sweep(str(mixed), tmp_path / "p", executor="inline", progress=False, skip_mismatched=True)
    assert res.info["skipped"] == {"step-9": "width 48 vs 32, heads 2 vs 4, kv heads 2 vs 4, head size 24 vs 8"}


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="affinity mask: Linux")
def test_workers_are_capped_at_the_cpus_in_one_line(runs, tmp_path, cli_inproc):
    one, _ = runs
    cpus = len(os.sched_getaffinity(0))
    out = tmp_path / "o"
    code, _, err = cli_inproc("emergence", str(one), "--out", str(out), "--workers", "1000000000",
                              "--revisions", "step-3")
    assert code == 0, err
    capped = [ln for ln in err.splitlines() if "warning" in ln]
    assert len(capped) == 1 and f"capped at the {cpus} CPU" in capped[0] and "--workers" in capped[0], err
    with pytest.warns(AttnscopeWarning, match="capped"):
        res = sweep(str(one), tmp_path / "p", revisions="step-3", workers=10**9, progress=False)
    assert res.info["workers"] == cpus


def test_an_unknown_stack_is_refused_before_any_work(runs, tmp_path, cli_inproc):
    one, _ = runs
    out = tmp_path / "o"
    code, _, err = cli_inproc("emergence", str(one), "--out", str(out), "--stack", "nosuch", "--executor", "inline")
    assert code == 2 and err.strip().count("\n") == 0 and "nosuch" in err and "rerun" not in err, err
    assert _no_store(out)
    with pytest.raises(InputError, match="stacks must be encoder, decoder, cross, not 'nosuch'"):
        sweep(str(one), tmp_path / "p", stacks="nosuch", executor="inline", progress=False)
    assert _no_store(tmp_path / "p")
    # a known stack the model lacks: one line from its first checkpoint, not one failure per revision
    code, _, err = cli_inproc("emergence", str(one), "--out", str(tmp_path / "q"), "--stack", "decoder")
    assert code == 2 and err.strip().count("\n") == 0 and "no decoder stack (it has encoder)" in err, err
    assert _no_store(tmp_path / "q")


@pytest.mark.skipif(sys.platform != "linux", reason="bytes in file names: Linux file systems")
def test_a_run_folder_with_a_non_utf8_name_is_one_line(runs, tmp_path, cli_inproc):
    one, _ = runs
    bad = os.fsdecode(os.fsencode(str(tmp_path)) + b"/run\xff")
    shutil.copytree(one, bad)
    out = tmp_path / "o"
    code, _, err = cli_inproc("emergence", bad, "--out", str(out), "--executor", "inline")
    assert code == 2 and err.strip().count("\n") == 0 and "not valid UTF-8" in err and "\\xff" in err, err
    assert "UnicodeEncodeError" not in err and _no_store(out)
    with pytest.raises(InputError, match="not valid UTF-8"):
        sweep(bad, tmp_path / "p", executor="inline", progress=False)
