"""``emergence`` on our own training runs: equal to ``geometry`` on every checkpoint, resumable, one-line errors."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pandas as pd
import pytest

from attnscope.emergence import list_revisions, sweep
from attnscope.errors import InputError
from attnscope.geometry import score

NUMBERS = ["symmetry", "directionality", "frobenius_norm", "n_outlier_rows", "n_outlier_cols"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny encoder run with the symmetric init: checkpoints at steps 4, 8, 12, scores logged at step 0."""
    from attnscope.training import TrainConfig, train

    out = tmp_path_factory.mktemp("runs") / "enc-sym"
    train(TrainConfig(objective="mlm", init="symmetric", steps=12, checkpoint_every=4, score_every=4, warmup=2,
                      n_layers=2, d_model=32, d_ff=64, seq_len=16, batch_size=4, eval_windows=2, threads=1,
                      progress=False, out=str(out)))
    return out


def test_a_run_equals_geometry_on_each_checkpoint(run_dir, tmp_path):
    res = sweep(str(run_dir), tmp_path / "out", executor="inline", progress=False)
    assert list(dict.fromkeys(res.table["revision"])) == ["step-0", "step-4", "step-8", "step-12"]
    assert (res.table["model"] == "enc-sym").all()
    for rev, grp in res.table.groupby("revision", sort=False):
        if rev == "step-0":  # from the run's log: the symmetric init, s = 1 and d = 0 exactly
            assert np.allclose(grp["symmetry"], 1.0, atol=1e-5) and np.allclose(grp["directionality"], 0.0, atol=1e-5)
            assert (grp["tokens"] == 0).all()
            continue
        ref = score(str(run_dir / "checkpoints" / rev))
        np.testing.assert_array_equal(grp[NUMBERS].to_numpy(float), ref[NUMBERS].to_numpy(float))
        assert list(grp["layer"]) == list(ref["layer"]) and list(grp["head"].fillna(-1)) == list(ref["head"].fillna(-1))
        assert (grp["tokens"] == int(rev[5:]) * 4 * 16).all()  # steps x batch x seq_len
    assert list(res.revisions["origin"]) == ["run log", "checkpoint", "checkpoint", "checkpoint"]


def test_a_killed_sweep_resumes_and_other_settings_are_refused(run_dir, tmp_path):
    out = tmp_path / "out"
    first = sweep(str(run_dir), out, revisions="step-4,step-8", executor="inline", progress=False)
    assert len(first.summary.done) == 2
    full = sweep(str(run_dir), out, executor="inline", progress=False)
    assert sorted(k.split("@")[0] for k in full.summary.skipped) == ["step-4", "step-8"]
    assert sorted(k.split("@")[0] for k in full.summary.done) == ["step-0", "step-12"]
    assert list(full.revisions["status"]) == ["scored", "stored", "stored", "scored"]
    with pytest.raises(InputError, match="k=2.0 \\(now 1.5\\)"):
        sweep(str(run_dir), out, k=1.5, executor="inline", progress=False)


def test_a_rewritten_checkpoint_is_scored_again(run_dir, tmp_path):
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    out = tmp_path / "out"
    sweep(str(copy), out, revisions="step-4", executor="inline", progress=False)
    weights = copy / "checkpoints" / "step-4" / "model.safetensors"
    weights.write_bytes(weights.read_bytes())  # same bytes, new file: a fingerprint that differs
    again = sweep(str(copy), out, revisions="step-4", executor="inline", progress=False)
    assert len(again.summary.done) == 1 and not again.summary.skipped


def test_a_folder_of_checkpoints(run_dir, tmp_path):
    folder = tmp_path / "ckpts"
    for step in (4, 12):
        shutil.copytree(run_dir / "checkpoints" / f"step-{step}", folder / f"checkpoint-{step}")
    (folder / "notes").mkdir()  # no step, no config: not a revision
    assert [(r.name, r.step) for r in list_revisions(str(folder))] == [("checkpoint-4", 4), ("checkpoint-12", 12)]
    res = sweep(str(folder), tmp_path / "out", executor="inline", progress=False, levels="layer")
    assert set(res.table["level"]) == {"layer"} and res.table["revision"].nunique() == 2
    with pytest.raises(InputError, match="no checkpoint folders"):
        list_revisions(str(tmp_path / "out"))


def test_cli_on_a_run(run_dir, tmp_path, cli_inproc):
    out = tmp_path / "o"
    code, stdout, err = cli_inproc("emergence", str(run_dir), "--out", str(out), "--executor", "inline")
    assert code == 0, err
    table = pd.read_parquet(out / "emergence.parquet")
    assert {"revision", "step", "tokens", "symmetry"} <= set(table.columns)
    formed = pd.read_csv(out / "formation.csv")
    assert set(formed["metric"]) == {"symmetry", "directionality"}
    for name in ("emergence.csv", "revisions.csv", "emergence_layers.png", "emergence_heads.png",
                 "emergence_formation.png", "emergence.html"):
        assert (out / name).is_file(), name
    assert "enc-sym" in stdout and "step-12" in stdout
    from attnscope.outputs import check_result_set

    check_result_set(out)  # one whole result: every file listed in the manifest, none changed
    manifest = json.loads((out / "attnscope-manifest.json").read_text())
    assert "emergence.html" in json.dumps(manifest)
    code, stdout, err = cli_inproc("emergence", str(run_dir), "--list")
    assert code == 0 and "run log" in stdout and not (tmp_path / "o2").exists()


@pytest.mark.parametrize(("args", "match"), [
    (["--revisions", "step-5"], "--revisions step-5: no such revision"),
    (["--k", "0"], "--k must be"),
    ([], "give --out DIR"),
    (["--workers", "0"], "--workers must be"),
])
def test_cli_bad_input_is_one_line(run_dir, tmp_path, cli_inproc, args, match):
    out = ["--out", str(tmp_path / "o")] if args else []
    code, _, err = cli_inproc("emergence", str(run_dir), *out, *args)
    assert code == 2 and err.strip().count("\n") == 0 and match in err, err


def test_not_a_source(tmp_path, cli_inproc):
    (tmp_path / "f.txt").write_text("x")
    for src, match in ((str(tmp_path / "f.txt"), "a file"), (str(tmp_path / "none"), "no such directory"),
                       ("org/x@step1", "without @revision")):
        code, _, err = cli_inproc("emergence", src, "--list")
        assert code == 2 and match in err, err


@pytest.mark.slow  # two spawned workers import torch
def test_local_pool_gives_the_inline_table(run_dir, tmp_path):
    inline = sweep(str(run_dir), tmp_path / "a", executor="inline", progress=False)
    pool = sweep(str(run_dir), tmp_path / "b", executor="local", workers=2, progress=False)
    pd.testing.assert_frame_equal(inline.table, pool.table)


def test_cli_behaviour_options_need_behaviour(run_dir, tmp_path, cli_inproc):
    code, _, err = cli_inproc("emergence", str(run_dir), "--out", str(tmp_path / "o"), "--windows", "2")
    assert code == 2 and "--windows configure the probes of --behaviour" in err


def test_cli_behaviour_lengths_formation_and_loss(run_dir, tmp_path, cli_inproc):
    from attnscope.heads.probes import run_probes

    out = tmp_path / "o"
    code, stdout, err = cli_inproc("emergence", str(run_dir), "--out", str(out), "--executor", "inline",
                                   "--revisions", "step-0,step-4,step-12", "--behaviour", "--probe", "random",
                                   "--random-windows", "1", "--random-length", "5", "--n-boot", "50")
    assert code == 0, err
    table = pd.read_parquet(out / "emergence.parquet")
    got = table[(table["revision"] == "step-12") & (table["level"] == "head")].sort_values(["layer", "head"])
    ref = run_probes(str(run_dir / "checkpoints" / "step-12"), "random", random_windows_n=1, random_length=5)
    np.testing.assert_allclose(got["previous_token_random"].to_numpy(float),
                               ref.sort_values(["layer", "head"])["previous_token"].to_numpy(float))
    formed = pd.read_csv(out / "formation.csv")
    assert {"noise", "margin", "outcome"} <= set(formed.columns)
    assert {"symmetry", "directionality", "induction_random", "previous_token_random"} <= set(formed["metric"])
    assert set(formed["outcome"]) <= {"formed", "inside the noise", "below min_change", "not scored"}
    assert "formation" in stdout
    revs = pd.read_csv(out / "revisions.csv")
    assert revs["loss"].notna().all() and revs["loss"].iloc[0] > 5  # the run's logged loss at every revision
    settled = pd.read_csv(out / "settling.csv")
    assert "few_units" in settled and settled["few_units"].all()  # 2 layers: never enough for an interval
    code, _, err = cli_inproc("emergence", str(run_dir), "--out", str(tmp_path / "p"), "--length", "9")
    assert code == 2 and "--length configure the probes of --behaviour" in err
