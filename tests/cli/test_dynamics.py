"""`attnscope dynamics ...`: the interface the acceptance checks rely on, and one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from attnscope.cli import app
from attnscope.dynamics import load_trajectory, trajectory_summary

runner = CliRunner()


def _run(*args):
    return runner.invoke(app, ["dynamics", *args])


def test_lyapunov_json_interface():
    """From x_0: 0.5 sits on the stable fixed point, 1.27 on a period-27 orbit, 1.4 is chaotic."""
    r = _run("lyapunov", "--preset", "paper", "--beta-o", "0.5", "--beta-o", "1.27", "--beta-o", "1.4",
             "--transient", "2000", "--steps", "2000", "--exponents", "3", "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert [d["beta_o"] for d in data] == [0.5, 1.27, 1.4]
    assert [d["regime"] for d in data] == ["periodic", "periodic", "chaotic"]
    for d in data:
        assert len(d["lyapunov"]) == 3 and d["lyapunov"] == sorted(d["lyapunov"], reverse=True)
        assert len(d["error"]) == 3 and all(0 <= e < 0.05 for e in d["error"])


def test_bifurcation_and_trajectory_write_outputs(tmp_path):
    out = tmp_path / "bif"
    r = _run("bifurcation", "--preset", "paper", "--param", "beta_o", "--start", "1.24", "--stop", "1.28",
             "--num", "5", "--steps", "400", "--transient", "200", "--lyap-steps", "100", "--out", str(out))
    assert r.exit_code == 0, r.output
    for f in ("bifurcation.csv", "points.parquet", "checkpoint.npz", "bifurcation.png", "lyapunov.png"):
        assert (out / f).is_file(), f
    table = pd.read_csv(out / "bifurcation.csv")
    assert len(table) == 5 and {"lambda_1", "lambda_2", "lambda_1_err", "regime", "regime_lyapunov",
                                "regime_distinct", "n_distinct"} <= set(table.columns)
    assert set(table["regime"]) <= {"periodic", "quasi-periodic", "chaotic", "hyperchaotic", "uncertain"}
    traj = tmp_path / "traj"
    r = _run("trajectory", "--preset", "paper", "--beta-o", "1.4", "--steps", "300", "--out", str(traj),
             "--init-state", str(out / "checkpoint.npz"))
    assert r.exit_code == 0, r.output
    z = load_trajectory(traj / "trajectory.npz")  # the one format, shared with the API
    assert z["mo_se"].shape == (1, 300, 3) and z["m"].shape == (1, 300, 4, 3)
    assert z["t"][0] == 4  # continues at t = C
    assert list(z["matrices"]) == ["o", "v", "q", "k"] and z["beta_o"].tolist() == [1.4]
    assert json.loads((traj / "summary.json").read_text())["runs"] == trajectory_summary(z)
    for f in ("timeseries.png", "power_spectrum.png", "autocorrelation.png", "phase_plane.png", "final_state.npz"):
        assert (traj / f).is_file(), f


def test_phase_and_finite_commands(tmp_path):
    r = _run("phase", "--x", "beta_o", "--x-start", "1.0", "--x-stop", "1.4", "--x-num", "2", "--y", "eps",
             "--y-start", "0.0", "--y-stop", "0.05", "--y-num", "2", "--transient", "50", "--steps", "50",
             "--executor", "inline", "--out", str(tmp_path / "ph"), "--color", "regime")
    assert r.exit_code == 0, r.output
    assert len(pd.read_csv(tmp_path / "ph" / "phase.csv")) == 4 and (tmp_path / "ph" / "phase.png").is_file()
    r = _run("finite", "--repeats", "1", "--repeats", "100", "--steps", "5", "--seeds", "2",
             "--out", str(tmp_path / "fin"), "--json")
    assert r.exit_code == 0, r.output
    assert [d["repeats"] for d in json.loads(r.stdout)] == [1, 100]


@pytest.mark.parametrize("args,match", [
    (["bifurcation", "--start", "1", "--stop", "2", "--num", "0", "--steps", "10", "--transient", "5",
      "--out", "{tmp}/x"], "at least one point"),
    (["lyapunov", "--set", "beta_o=nan", "--steps", "10", "--transient", "0"], "beta_o must be finite"),
    (["lyapunov", "--beta-o", "inf", "--steps", "10", "--transient", "0"], "finite"),
    (["lyapunov", "--init-state", "{tmp}/bad.npz", "--steps", "10", "--transient", "0"], "lacks key"),
    (["lyapunov", "--config", "{tmp}/m4.yaml", "--steps", "10", "--transient", "0"], "rows but M = 4"),
    (["lyapunov", "--config", "{tmp}/c8.yaml", "--steps", "10", "--transient", "0"], "context C = 8"),
    # the sweeps' Slurm options are the --slurm-* of geometry and train; the old names are aliases
    (["bifurcation", "--start", "1", "--stop", "2", "--num", "2", "--partition", "gpu", "--out", "{tmp}/x"],
     "--slurm-* options need --executor slurm (not none)"),
    (["phase", "--x-start", "1", "--x-stop", "2", "--x-num", "2", "--y-start", "0", "--y-stop", "1", "--y-num", "2",
      "--executor", "slurm", "--time-min", "0", "--out", "{tmp}/x"], "--slurm-time must be"),
    (["phase", "--x-start", "1", "--x-stop", "2", "--x-num", "2", "--y-start", "0", "--y-stop", "1", "--y-num", "2",
      "--executor", "slurm", "--slurm-mem", "-1", "--out", "{tmp}/x"], "--slurm-mem must be"),
    (["phase", "--x-start", "1", "--x-stop", "2", "--x-num", "2", "--y-start", "0", "--y-stop", "1", "--y-num", "2",
      "--executor", "slurm", "--slurm-time", "9999999999", "--out", "{tmp}/x"], "--slurm-time 9999999999 is too large"),
    (["bifurcation", "--start", "1", "--stop", "2", "--num", "2", "--executor", "bogus", "--out", "{tmp}/x"],
     "choose one of none, inline, local, slurm"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, args, match):
    import yaml

    from attnscope.dynamics import load_preset

    np.savez(tmp_path / "bad.npz", mv_window=np.zeros((4, 3)))
    d = load_preset("paper").to_dict()
    (tmp_path / "m4.yaml").write_text(yaml.safe_dump({**d, "features": 4}))
    (tmp_path / "c8.yaml").write_text(yaml.safe_dump({**d, "positional_bits": 3}))
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    env = {**os.environ, "NUMBA_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "attnscope", "dynamics", *args], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and match in lines[0], p.stderr
    assert not (tmp_path / "x").exists()  # refused before anything is written


def test_show_and_random_weights_config(tmp_path):
    r = _run("show", "--weights-seed", "4", "--set", "beta_o=1.1")
    assert r.exit_code == 0, r.output
    assert "beta_o: 1.1" in r.stdout and "name: random-seed4" in r.stdout
    cfg = tmp_path / "rand.yaml"
    cfg.write_text("seed: 4\nfeatures: 5\npositional_bits: 1\nsegments: 4\nsegment_length: 2\ngamma: 30\n")
    r = _run("lyapunov", "--config", str(cfg), "--beta-o", "0.5", "--steps", "200", "--transient", "100", "--json")
    assert r.exit_code == 0, r.output
    assert len(json.loads(r.stdout)[0]["lyapunov"]) == 2
