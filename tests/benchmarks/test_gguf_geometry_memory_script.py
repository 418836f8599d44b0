"""benchmarks/gguf_geometry_memory.py runs both header readers end to end and reports their ratio."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ._memory_scripts import check_memory_script

sys.path.insert(0, str(Path(__file__).parents[1] / "adversarial"))
from _header_fuzz import write_gguf  # noqa: E402  (a small llama GGUF with a vocabulary)


@pytest.mark.slow
def test_gguf_geometry_memory_benchmark_smoke(tmp_path):
    gguf = write_gguf(tmp_path / "small.gguf")
    check_memory_script("gguf_geometry_memory.py", gguf, tmp_path, ("walk", "reader"), "MB", 10)
