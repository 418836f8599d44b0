"""Shared check of the peak-memory benchmark scripts (benchmarks/_peak.py): run one end to end, read its table."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def check_memory_script(script: str, model: Path, tmp_path: Path, configs: tuple[str, str], unit: str,
                        smallest: float) -> str:
    """Run ``benchmarks/SCRIPT MODEL --repeats 1``; each configuration's peak (above ``smallest`` ``unit``)
    and the ratio row are in the appended table, which is returned."""
    md = tmp_path / "out.md"
    env = {**os.environ, "PYTHONPATH": str(BENCHMARKS.parent / "src")}
    res = subprocess.run([sys.executable, str(BENCHMARKS / script), str(model), "--repeats", "1", "--append", str(md)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert res.returncode == 0, res.stderr
    text = md.read_text()
    for config in configs:
        peak = re.search(rf"\| {re.escape(model.name)} \| {config} \| ([0-9.]+) {unit}", text)
        assert peak is not None and float(peak.group(1)) > smallest, text
    label = re.escape(f"{configs[1]} / {configs[0]}")
    assert re.search(rf"\| {re.escape(model.name)} \| {label} \| \*\*[0-9.]+x\*\*", text), text
    return text
