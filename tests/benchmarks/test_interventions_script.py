"""benchmarks/interventions.py at a tiny size: both precisions timed side by side, the ratio and the agreement
reported (a user with a GPU runs the same script with ``--device cuda``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_interventions_benchmark_times_both_precisions_and_says_how_far_apart(tmp_path, minilm_dir):
    md = tmp_path / "i.md"
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "HF_HUB_OFFLINE": "1",
           "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "interventions.py"), "random-smollm2", "--tokenizer",
                        str(minilm_dir), "--layers", "28,29", "--windows", "2", "--length", "12", "--random-windows",
                        "1", "--append", str(md)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    text = md.read_text()
    assert text.startswith("### Interventions: random-smollm2, 270 heads x 3")
    rows = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\| layer (\d+, [\w-]+) .*?\| ([\d.]+)x \|$", text, re.M)}
    assert set(rows) == {"28, full", "28, bf16-delta", "29, full", "29, bf16-delta"}
    assert rows["28, full"] == 1.0 and rows["28, bf16-delta"] > 0
    agree = re.search(r"at most ([\d.]+)% of the row's 95% interval half-width", text)
    assert agree and float(agree.group(1)) < 5  # bf16-delta moves no row by more than a sliver of its interval


def test_random_smollm2_needs_a_tokenizer():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "interventions.py"), "random-smollm2"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "needs --tokenizer" in r.stderr


def test_interventions_benchmark_compares_one_process_with_forked_workers(tmp_path, minilm_dir):
    md = tmp_path / "w.md"
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "HF_HUB_OFFLINE": "1"}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "interventions.py"), "random-smollm2", "--tokenizer",
                        str(minilm_dir), "--layers", "27,28,29", "--windows", "1", "--length", "12", "--random-windows",
                        "1", "--precision", "bf16-delta", "--workers", "2", "--append", str(md)],
                       capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    text = md.read_text()
    assert text.startswith("### Interventions: one process of 2 threads against 2 one-thread workers")
    ratios = re.findall(r"\| ([\d.]+)x \|$", text, re.M)
    assert len(ratios) == 2 and ratios[0] == "1.00" and float(ratios[1]) > 0


@pytest.mark.slow
def test_compare_baseline_runs_intervene_with_a_revisions_code_and_this_checkouts(tmp_path):
    """Two processes, each on its own source tree (REV from git archive), the ratio and the tables' agreement."""
    sys.path.insert(0, str(ROOT / "tests" / "heads"))
    from _tiny_gguf import tiny_llama_model, write_llama_gguf_model

    gguf = write_llama_gguf_model(tmp_path / "tiny.gguf", tiny_llama_model(n_layers=2, d=32, n_heads=4, n_kv=2))
    md = tmp_path / "c.md"
    env = {"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "HF_HUB_OFFLINE": "1",
           "ATTNSCOPE_QUIET": "1"}
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "interventions.py"), str(gguf), "--compare-baseline",
                        "HEAD", "--layers", "1", "--windows", "2", "--length", "24", "--random-windows", "1",
                        "--threads", "1", "--append", str(md)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    text = md.read_text()
    assert text.startswith("### Interventions against HEAD: tiny.gguf, layers 1 x (sym, anti, ablate)")
    assert "| baseline HEAD |" in text and "| this checkout |" in text and ("(AVX" in text or "(no AVX2)" in text)
    rows = re.search(r"(\d+) loss rows, largest \|delta difference\| ([\d.e+-]+) nats", text)
    assert rows and int(rows.group(1)) == 4 * 3 and float(rows.group(2)) < 1e-5  # the same code: the same deltas
    assert re.search(r"Ratio: wall [\d.]+x, CPU [\d.]+x", text)
