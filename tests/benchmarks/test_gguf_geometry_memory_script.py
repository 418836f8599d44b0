"""benchmarks/gguf_geometry_memory.py runs both header readers end to end and reports their ratio."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gguf_geometry_memory.py"
sys.path.insert(0, str(Path(__file__).parents[1] / "adversarial"))
from _header_fuzz import write_gguf  # noqa: E402  (a small llama GGUF with a vocabulary)


@pytest.mark.slow
def test_gguf_geometry_memory_benchmark_smoke(tmp_path):
    gguf = write_gguf(tmp_path / "small.gguf")
    md = tmp_path / "out.md"
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parents[1] / "src")}
    res = subprocess.run([sys.executable, str(SCRIPT), str(gguf), "--repeats", "1", "--append", str(md)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr
    text = md.read_text()
    for config in ("walk", "reader"):
        peak = re.search(rf"\| small.gguf \| {config} \| ([0-9.]+) MB", text)
        assert peak is not None and float(peak.group(1)) > 10, text
    assert re.search(r"\| small.gguf \| reader / walk \| \*\*[0-9.]+x\*\*", text)
