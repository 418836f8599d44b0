"""The seed grid: validation of the axes, inline and local executors, kill and resume, compare on the result."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from attnscope.errors import ConfigError, InputError
from attnscope.training.compare import compare
from attnscope.training.grid import grid_points, parse_seeds, run_grid
from tests.conftest import invoke_cli

TINY = dict(preset="bert-mini", n_layers=1, n_heads=2, d_model=16, d_ff=32, seq_len=16, batch_size=2, steps=4,
            checkpoint_every=2, score_every=2, eval_windows=2, log_every=1, warmup=1, threads=1)
TIMING = ("train_seconds", "geometry_seconds")


def losses(run_dir: Path) -> list[dict]:
    """metrics.jsonl without the wall-clock fields."""
    out = []
    for line in (run_dir / "metrics.jsonl").read_text().splitlines():
        rec = json.loads(line)
        out.append({k: v for k, v in rec.items() if k not in TIMING})
    return out


def test_grid_axes_are_validated(tmp_path):
    pts = grid_points(TINY, seeds=[2, 0], inits=["default", "symmetric"], objectives=["mlm", "clm"], out=tmp_path)
    assert [Path(p.out).name for p in pts][:3] == ["mlm-default-seed2", "mlm-default-seed0", "mlm-symmetric-seed2"]
    assert len(pts) == 8 and all(p.resume and not p.progress for p in pts)
    assert {(p.objective, p.init, p.seed) for p in pts} == {
        (o, i, s) for o in ("mlm", "clm") for i in ("default", "symmetric") for s in (2, 0)
    }
    assert [p.init for p in grid_points(TINY, seeds=[0], out=tmp_path)] == ["default"]  # the base config's init
    for seeds, match in (([], "empty"), ([1, 1], "more than once"), ([-1], "negative"), (["a"], "not an integer"),
                         ([1.5], "not an integer"), ([True], "not an integer")):
        with pytest.raises(InputError, match=match):
            grid_points(TINY, seeds=seeds, out=tmp_path)
    with pytest.raises(InputError, match="inits lists symmetric more than once"):
        grid_points(TINY, seeds=[0], inits=["symmetric", "symmetric"], out=tmp_path)
    with pytest.raises(InputError, match="objectives is empty"):
        grid_points(TINY, seeds=[0], objectives=[], out=tmp_path)
    with pytest.raises(ConfigError, match="init=.* is unknown"):
        grid_points(TINY, seeds=[0], inits=["nope"], out=tmp_path)
    with pytest.raises(ConfigError, match="unknown training option"):
        grid_points({**TINY, "stepz": 3}, seeds=[0], out=tmp_path)
    assert parse_seeds("0-2, 5") == [0, 1, 2, 5]
    for text, match in (("", "empty"), (" , ", "empty"), ("1,1", "more than once"), ("0-2,2", "more than once"),
                        ("x", "integers"), ("3-1", "range")):
        with pytest.raises(InputError, match=match):
            parse_seeds(text)
    with pytest.raises(InputError, match="executor"):
        run_grid(TINY, seeds=[0], out=tmp_path / "g", executor="cloud")
    (tmp_path / "file").write_text("x")
    with pytest.raises(InputError, match="is a file"):
        run_grid(TINY, seeds=[0], out=tmp_path / "file")
    (tmp_path / "torn" / ".grid").mkdir(parents=True)
    (tmp_path / "torn" / ".grid" / "grid.json").write_text('{"base": ')
    with pytest.raises(InputError, match="not a grid record"):
        run_grid(TINY, seeds=[0], out=tmp_path / "torn")
    assert not any((tmp_path / "torn").glob("mlm-*"))  # refused before any training


@pytest.mark.slow
def test_inline_grid_kill_one_seed_and_resume(tmp_path):
    out = tmp_path / "grid"
    g = run_grid(TINY, seeds=[0, 1], inits=["default", "symmetric"], out=out, progress=False)
    names = ["mlm-default-seed0", "mlm-default-seed1", "mlm-symmetric-seed0", "mlm-symmetric-seed1"]
    assert g.summary.ok and sorted(g.summary.done) == names
    assert sorted(p.name for p in out.iterdir() if not p.name.startswith(".")) == names
    assert sorted(g.runs["run"]) == names and set(g.runs["steps"]) == {4}
    # compare understands the grid: each symmetric run is paired with the default run of its seed
    cmp = compare(sorted(p for p in out.iterdir() if not p.name.startswith(".")))
    base = cmp.runs.set_index("run")["baseline"]
    assert base["mlm-symmetric-seed1"] == "mlm-default-seed1" and base["mlm-symmetric-seed0"] == "mlm-default-seed0"

    # kill mlm-symmetric-seed1 after its step-2 checkpoint: the last checkpoint, summary and store entry gone
    killed = out / "mlm-symmetric-seed1"
    full = losses(killed)
    shutil.rmtree(killed / "checkpoints" / "step-4")
    (killed / "summary.json").unlink()
    for f in (out / ".grid" / "tasks").glob("mlm-symmetric-seed1*"):
        f.unlink()
    others = {p: p.stat().st_mtime_ns for n in names if n != killed.name for p in (out / n).rglob("*")}
    g2 = run_grid(TINY, seeds=[0, 1], inits=["default", "symmetric"], out=out, progress=False)
    assert g2.summary.done == ["mlm-symmetric-seed1"] and sorted(g2.summary.skipped) == sorted(set(names) - {killed.name})
    assert losses(killed) == full  # resumed exactly from step 2
    assert {p: p.stat().st_mtime_ns for p in others} == others  # the other seeds were not touched
    assert len(g2.runs) == 4

    # a removed run directory is trained again (its store entry alone does not count as finished)
    shutil.rmtree(out / "mlm-default-seed0")
    g3 = run_grid(TINY, seeds=[0, 1], inits=["default", "symmetric"], out=out, progress=False)
    assert g3.summary.done == ["mlm-default-seed0"] and (out / "mlm-default-seed0" / "summary.json").is_file()

    # a rerun with other settings into the same directory is refused in one line
    with pytest.raises(InputError, match="steps = 4, not 6"):
        run_grid({**TINY, "steps": 6}, seeds=[0, 1], inits=["default", "symmetric"], out=out, progress=False)


@pytest.mark.slow
def test_local_executor_trains_the_same_runs_as_inline(tmp_path):
    inline = run_grid(TINY, seeds=[0, 1], out=tmp_path / "inline", progress=False)
    local = run_grid(TINY, seeds=[0, 1], out=tmp_path / "local", executor="local", workers=2, progress=False)
    assert inline.summary.ok and local.summary.ok and sorted(local.summary.done) == ["mlm-default-seed0",
                                                                                      "mlm-default-seed1"]
    for name in ("mlm-default-seed0", "mlm-default-seed1"):
        assert losses(tmp_path / "local" / name) == losses(tmp_path / "inline" / name)
    assert losses(tmp_path / "local" / "mlm-default-seed0") != losses(tmp_path / "local" / "mlm-default-seed1")
    again = run_grid(TINY, seeds=[0, 1], out=tmp_path / "local", executor="local", workers=2, progress=False)
    assert not again.summary.done and len(again.summary.skipped) == 2


SLOW_GRID = """
import sys, time
import attnscope.training.data as data
sample = data.sample_windows
data.sample_windows = lambda *a, **k: (time.sleep(0.1), sample(*a, **k))[1]  # slowed from the test, not the loop
from attnscope.training.grid import run_grid
run_grid({cfg}, seeds=[0, 1], out=sys.argv[1], progress=False)
"""


@pytest.mark.slow
def test_sigkill_during_a_grid_then_resume(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    cfg = {**TINY, "steps": 20, "checkpoint_every": 5}
    out = tmp_path / "grid"
    proc = subprocess.Popen([sys.executable, "-c", SLOW_GRID.format(cfg=cfg), str(out)], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    second = out / "mlm-default-seed1"
    try:
        deadline = time.monotonic() + 120  # a bound on waiting, not an assertion on speed
        while not (second / "checkpoints" / "step-5").is_dir():
            assert proc.poll() is None, proc.stderr.read().decode()
            assert time.monotonic() < deadline, "the grid never reached the second run's first checkpoint"
            time.sleep(0.05)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    first = out / "mlm-default-seed0"
    assert (first / "summary.json").is_file() and not (second / "summary.json").is_file()
    untouched = {p: p.stat().st_mtime_ns for p in first.rglob("*")}
    g = run_grid(cfg, seeds=[0, 1], out=out, progress=False)
    assert g.summary.done == ["mlm-default-seed1"] and g.summary.skipped == ["mlm-default-seed0"]
    assert {p: p.stat().st_mtime_ns for p in first.rglob("*")} == untouched
    ref = run_grid(cfg, seeds=[1], out=tmp_path / "ref", progress=False)  # the same run, never killed
    assert ref.summary.ok and losses(second) == losses(tmp_path / "ref" / "mlm-default-seed1")


def train_cli(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    return invoke_cli(monkeypatch, capsys, "train", *args)


TINY_FLAGS = ["--n-layers", "1", "--n-heads", "2", "--d-model", "16", "--d-ff", "32", "--seq-len", "16",
              "--batch-size", "2", "--steps", "2", "--checkpoint-every", "2", "--score-every", "2", "--eval-windows",
              "2", "--warmup", "1", "--threads", "1", "--no-progress"]


def test_train_cli_grid_bad_axes_are_one_line(tmp_path, monkeypatch, capsys):
    out = tmp_path / "g"
    for args in (["--seeds", ""], ["--seeds", "1,1"], ["--seeds", "0,x"], ["--seed", "0", "--seeds", "0,1"],
                 ["--seeds", "0", "--inits", "default,default"], ["--seeds", "0", "--objectives", ","],
                 ["--seeds", "0", "--init", "symmetric", "--inits", "default"], ["--seeds", "0", "--workers", "two"],
                 ["--seeds", "0", "--executor", "cloud"], ["--seeds", "0", "--workers", "0"],
                 ["--seeds", "0", "--workers", "3"],  # ignored without --executor local
                 ["--seeds", "0", "--executor", "slurm", "--workers", "2"],
                 ["--seeds", "0", "--slurm-time", "30"],  # a Slurm option without --executor slurm
                 ["--seeds", "0", "--executor", "slurm", "--slurm-time", "-5"],
                 ["--seeds", "0", "--executor", "slurm", "--slurm-mem", "nan"],
                 ["--seeds", "0", "--executor", "slurm", "--slurm-gpus", "1.5"],
                 ["--seeds", "0", "--executor", "slurm", "--slurm-time", "99999999999999999999"],
                 ["--seeds", "0", "--executor", "slurm", "--slurm-mem", "inf"]):
        code, _, err = train_cli(monkeypatch, capsys, *TINY_FLAGS, "--out", out, *args)
        assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (args, err)
    assert not any(out.glob("mlm-*"))


@pytest.mark.slow
def test_train_cli_grid(tmp_path, monkeypatch, capsys):
    out = tmp_path / "g"
    code, stdout, err = train_cli(monkeypatch, capsys, *TINY_FLAGS, "--out", out, "--seeds", "0-1",
                                  "--inits", "default,symmetric", "--json")
    assert code == 0, err
    rows = json.loads(stdout)
    assert sorted(r["run"] for r in rows) == ["mlm-default-seed0", "mlm-default-seed1", "mlm-symmetric-seed0",
                                              "mlm-symmetric-seed1"]
    assert "4 trained, 0 already done, 0 failed" in err
    code, _, err = train_cli(monkeypatch, capsys, *TINY_FLAGS, "--out", out, "--seeds", "0-1",
                             "--inits", "default,symmetric")
    assert code == 0 and "0 trained, 4 already done" in err


@pytest.mark.slurm
def test_slurm_executor_runs_the_grid_as_an_array(tmp_path, slurm_cluster):
    """Each point is one array task on the real cluster; the runs equal the inline ones; a rerun submits nothing."""
    slurm = {"partition": slurm_cluster["partition"], "time_min": 10}
    inline = run_grid(TINY, seeds=[0, 1], out=tmp_path / "inline", progress=False)
    grid = run_grid(TINY, seeds=[0, 1], out=tmp_path / "slurm", executor="slurm", slurm=slurm, progress=False)
    assert inline.summary.ok and grid.summary.ok, grid.summary.failed
    assert sorted(grid.summary.done) == ["mlm-default-seed0", "mlm-default-seed1"]
    assert list((tmp_path / "slurm" / ".grid" / "slurm").glob("*_submission.sh"))  # it went through sbatch
    for name in ("mlm-default-seed0", "mlm-default-seed1"):
        assert losses(tmp_path / "slurm" / name) == losses(tmp_path / "inline" / name)
    again = run_grid(TINY, seeds=[0, 1], out=tmp_path / "slurm", executor="slurm", slurm=slurm, progress=False)
    assert not again.summary.done and len(again.summary.skipped) == 2


def test_more_seeds_later_train_only_the_new_points(tmp_path):
    first = run_grid(TINY, seeds=[0], out=tmp_path / "g", progress=False)
    assert first.summary.done == ["mlm-default-seed0"]
    before = (tmp_path / "g" / "mlm-default-seed0" / "metrics.jsonl").read_bytes()
    more = run_grid(TINY, seeds=[0, 1], out=tmp_path / "g", progress=False)
    assert more.summary.done == ["mlm-default-seed1"] and more.summary.skipped == ["mlm-default-seed0"]
    assert (tmp_path / "g" / "mlm-default-seed0" / "metrics.jsonl").read_bytes() == before


def test_a_point_retrained_by_hand_with_other_settings_is_not_counted_as_the_grids(tmp_path):
    """A finished point whose directory now holds a run with another --lr was reported as 'already done', with
    the deleted run's numbers."""
    from attnscope.training import TrainConfig, train

    run_grid(TINY, seeds=[0, 1], out=tmp_path / "g", progress=False)
    redo = tmp_path / "g" / "mlm-default-seed1"
    shutil.rmtree(redo)
    train(TrainConfig(**{**TINY, "seed": 1, "lr": 1e-3, "out": str(redo), "progress": False}))
    with pytest.raises(InputError, match=r"mlm-default-seed1 holds a run with lr = 0\.001, not the grid's 0\.0005"):
        run_grid(TINY, seeds=[0, 1], out=tmp_path / "g", progress=False)


def test_a_missing_corpus_is_refused_before_the_grid_starts_and_the_fixed_rerun_runs(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        run_grid({**TINY, "data": str(tmp_path / "nope.txt")}, seeds=[0, 1], out=tmp_path / "g", progress=False)
    assert not (tmp_path / "g" / ".grid" / "grid.json").exists()
    # a grid record whose runs never started (e.g. they all failed at once) does not pin the settings
    (tmp_path / "empty").mkdir()  # exists, so the grid starts; an empty directory is no corpus: every run fails
    assert run_grid({**TINY, "data": str(tmp_path / "empty")}, seeds=[0], out=tmp_path / "h", progress=False).summary.failed
    assert run_grid(TINY, seeds=[0], out=tmp_path / "h", progress=False).summary.done == ["mlm-default-seed0"]


def test_grids_and_runs_do_not_nest(tmp_path):
    """A grid inside a run directory, or a run inside a grid's directory, broke 'compare DIR/*'."""
    from attnscope.training import TrainConfig, train

    train(TrainConfig(**{**TINY, "out": str(tmp_path / "run"), "progress": False}))
    with pytest.raises(InputError, match="holds a training run; a grid needs a directory of its own"):
        run_grid(TINY, seeds=[0], out=tmp_path / "run", progress=False)
    run_grid(TINY, seeds=[0], out=tmp_path / "g", progress=False)
    with pytest.raises(InputError, match="holds a seed grid"):
        train(TrainConfig(**{**TINY, "out": str(tmp_path / "g"), "progress": False}))
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == [".grid", "mlm-default-seed0"]
