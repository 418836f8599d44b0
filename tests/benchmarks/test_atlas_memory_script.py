"""benchmarks/atlas_memory.py runs both sides (now, previous) end to end and reports their ratio."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "atlas_memory.py"
sys.path.insert(0, str(Path(__file__).parents[1] / "heads"))
from _tiny_gguf import tiny_llama_model, write_llama_gguf_model  # noqa: E402


@pytest.mark.slow
@pytest.mark.skipif(any(importlib.util.find_spec(n) is None for n in ("transformers", "accelerate", "gguf")),
                    reason="needs transformers and the gguf extra (accelerate, gguf)")
def test_atlas_memory_benchmark_smoke(tmp_path):
    gguf = write_llama_gguf_model(tmp_path / "tiny.gguf", tiny_llama_model(n_layers=2, d=32, n_heads=4, n_kv=2))
    md = tmp_path / "out.md"
    env = {**os.environ, "PYTHONPATH": str(SCRIPT.parents[1] / "src")}
    res = subprocess.run([sys.executable, str(SCRIPT), str(gguf), "--repeats", "1", "--append", str(md)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr
    text = md.read_text()
    for config in ("now", "previous"):
        peak = re.search(rf"\| tiny.gguf \| {config} \| ([0-9.]+) GiB", text)
        assert peak is not None and float(peak.group(1)) > 0.1, text
    assert re.search(r"\| tiny.gguf \| previous / now \| \*\*[0-9.]+x\*\*", text)
