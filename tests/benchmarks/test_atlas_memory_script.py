"""benchmarks/atlas_memory.py runs both sides (now, previous) end to end and reports their ratio."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from ._memory_scripts import check_memory_script

sys.path.insert(0, str(Path(__file__).parents[1] / "heads"))
from _tiny_gguf import tiny_llama_model, write_llama_gguf_model  # noqa: E402


@pytest.mark.slow
@pytest.mark.skipif(any(importlib.util.find_spec(n) is None for n in ("transformers", "accelerate", "gguf")),
                    reason="needs transformers and the gguf extra (accelerate, gguf)")
def test_atlas_memory_benchmark_smoke(tmp_path):
    gguf = write_llama_gguf_model(tmp_path / "tiny.gguf", tiny_llama_model(n_layers=2, d=32, n_heads=4, n_kv=2))
    check_memory_script("atlas_memory.py", gguf, tmp_path, ("now", "previous"), "GiB", 0.1)
