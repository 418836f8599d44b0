"""benchmarks/geometry_offsets.py runs end to end at a few offsets and reports agreement with the explicit route."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "geometry_offsets.py"


@pytest.mark.slow
def test_geometry_offsets_benchmark_smoke(tmp_path):
    md = tmp_path / "out.md"
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parents[1] / "src")}
    res = subprocess.run([sys.executable, str(SCRIPT), "--offsets", "8", "--full-offsets", "2", "--explicit-pairs", "1",
                          "--reps", "1", "--md", str(md)], capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr
    text = md.read_text()
    err_s, err_d = (float(x) for x in re.search(r"\|s\| ([0-9.e+-]+), \|d\| ([0-9.e+-]+?)\.?$", text, re.M).groups())
    assert err_s < 1e-5 and err_d < 1e-4
    assert "extrapolated" in text
