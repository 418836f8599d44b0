"""benchmarks/geometry_spectra.py runs end to end on one layer, and its section reports the ratio and agreement."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "geometry_spectra.py"


@pytest.mark.slow
def test_geometry_spectra_benchmark_smoke(tmp_path):
    md = tmp_path / "out.md"
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parents[1] / "src")}
    res = subprocess.run([sys.executable, str(SCRIPT), "--layers", "1", "--levels", "head", "--check-heads", "1",
                          "--md", str(md)], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr
    text = md.read_text()
    assert re.search(r"\| \*\*ratio\*\* \| \*\*[0-9.]+x\*\* \| \*\*[0-9.]+x\*\* \| target < 2x \|", text)
    assert "identical: True" in text
    err = float(re.search(r"max error ([0-9.e+-]+?) of", text).group(1))
    assert err < 1e-6


def test_an_unwritable_md_is_refused_before_any_work(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parents[1] / "src")}
    bad = tmp_path / "file"
    bad.write_text("x")
    res = subprocess.run([sys.executable, str(SCRIPT), "--md", str(bad / "out.md")], capture_output=True, text=True,
                         env=env, timeout=120)
    assert res.returncode != 0 and "geometry_spectra.py:" in res.stderr
