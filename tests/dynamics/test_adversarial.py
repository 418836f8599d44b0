"""Hostile input to `attnscope dynamics`: every case is one line on stderr and exit 2, before any work,
and leaves no result file behind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from attnscope.dynamics import load_preset

HEAVY = ["--num", "4001", "--steps", "120000", "--transient", "100000"]  # never reached: checked first
SWEEP = ["bifurcation", "--start", "1.24", "--stop", "1.28", *HEAVY]
PHASE = ["phase", "--x-start", "1.0", "--x-stop", "1.4", "--x-num", "40", "--y-start", "50", "--y-stop", "300",
         "--y-num", "40", "--executor", "inline"]

CASES = [
    (["show", "--weights-seed", "-1"], "weights seed must be >= 0"),
    (["show", "--set", "x0_row=abc"], "x0_row must be an integer"),
    (["show", "--set", "x0_row=1.5"], "x0_row must be an integer"),
    (["show", "--set", "beta_o=abc"], "beta_o must be a number"),
    (["show", "--set", "gamma=[1, 2]"], "gamma must be a number"),
    (["show", "--set", "eps=.inf"], "eps must be finite"),
    (["trajectory", "--feature", "3", "--out", "{tmp}/o"], "--feature must be in 0..2"),
    (["trajectory", "--feature", "-1", "--out", "{tmp}/o"], "--feature must be in 0..2"),
    (["trajectory", "--steps", "0", "--out", "{tmp}/o"], "--steps must be >= 2"),
    ([*SWEEP, "--feature", "3", "--out", "{tmp}/o"], "--feature must be in 0..2"),
    ([*SWEEP, "--section-feature", "5", "--out", "{tmp}/o"], "--section-feature must be in 0..2"),
    (["bifurcation", "--start", "1.26", "--stop", "1.26", *HEAVY, "--out", "{tmp}/o"], "needs start < stop"),
    (["bifurcation", "--start", "1.28", "--stop", "1.24", *HEAVY, "--out", "{tmp}/o"], "needs start < stop"),
    ([*SWEEP, "--lyap-steps", "-5", "--out", "{tmp}/o"], "--lyap-steps must be >= 0"),
    ([*SWEEP, "--workers", "0", "--out", "{tmp}/o"], "--workers must be >= 1"),
    ([*SWEEP, "--workers", "-3", "--executor", "local", "--out", "{tmp}/o"], "--workers must be >= 1"),
    ([*SWEEP, "--checkpoint-steps", "0", "--out", "{tmp}/o"], "--checkpoint-steps must be >= 1"),
    ([*SWEEP, "--chunk", "0", "--out", "{tmp}/o"], "--chunk must be >= 1"),
    ([*PHASE, "--steps", "0", "--out", "{tmp}/o"], "--steps >= 1"),
    ([*PHASE, "--workers", "0", "--out", "{tmp}/o"], "--workers must be >= 1"),
    ([*SWEEP, "--out", "{tmp}/file/o"], "is a file, not a directory"),
    ([*PHASE, "--out", "{tmp}/file/o"], "is a file, not a directory"),
    (["trajectory", "--out", "{tmp}/file/o"], "is a file, not a directory"),
    (["finite", "--out", "{tmp}/file/o"], "is a file, not a directory"),
    (["lyapunov", "--out", "{tmp}/file/o/t.csv"], "is a file, not a directory"),
    (["show", "--config", "{tmp}/features.yaml"], "features must be an integer"),
    (["show", "--config", "{tmp}/gamma.yaml"], "gamma must be finite"),
    (["show", "--config", "{tmp}/eps.yaml"], "eps must be a number"),
    (["show", "--config", "{tmp}/seed.yaml"], "seed must be >= 0"),
    (["show", "--config", "{tmp}/counts.yaml"], "counts entry must be an integer"),
    (["show", "--config", "{tmp}/x0row.yaml"], "x0 row must be an integer"),
    (["show", "--config", "{tmp}/x0.yaml"], "x0 must be a mapping"),
]


def _configs(tmp) -> None:
    (tmp / "file").write_text("a file where a directory is needed\n")
    (tmp / "features.yaml").write_text("seed: 4\nfeatures: three\ngamma: 30\n")
    (tmp / "gamma.yaml").write_text("seed: 4\ngamma: .nan\n")
    (tmp / "eps.yaml").write_text("seed: 4\ngamma: 30\neps: abc\n")
    (tmp / "seed.yaml").write_text("seed: -2\ngamma: 30\n")
    paper = load_preset("paper").to_dict()
    (tmp / "counts.yaml").write_text(yaml.safe_dump({**paper, "counts": ["a", "b", "c"]}))
    (tmp / "x0row.yaml").write_text(yaml.safe_dump({**paper, "x0": {"matrix": "o", "row": "two"}}))
    (tmp / "x0.yaml").write_text(yaml.safe_dump({**paper, "x0": 5}))


@pytest.mark.parametrize("args,match", CASES, ids=[" ".join(c[0][:1] + c[0][-4:]) for c in CASES])
def test_hostile_input_is_one_line_exit_2(tmp_path, args, match):
    _configs(tmp_path)
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    env = {**os.environ, "NUMBA_NUM_THREADS": "1"}
    p = subprocess.run([sys.executable, "-m", "attnscope", "dynamics", *args], capture_output=True, text=True,
                       env=env, timeout=120)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and match in lines[0], p.stderr
    assert "Traceback" not in p.stderr
    out = tmp_path / "o"
    assert not out.exists() or not any(out.iterdir()), "a rejected run left files behind"


def test_docs_count_these_cases() -> None:
    doc = Path(__file__).resolve().parents[2] / "docs" / "dynamics.md"
    if not doc.exists():
        pytest.skip("docs not shipped with this checkout")
    assert f"(tests/dynamics/test_adversarial.py): {len(CASES)} cases" in " ".join(doc.read_text().split())
