"""The GPU benchmark scripts run their own code at a tiny shape on CPU (``--smoke``), so a user with a GPU
does not find their bugs first; without ``--smoke`` and without CUDA they refuse in one line."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SRC = str(ROOT / "src")


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    env = {"PYTHONPATH": SRC, "PATH": "/usr/bin:/bin", "HOME": str(Path.home()), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), *args], capture_output=True,
                          text=True, env=env, timeout=600)


def _table_rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| objective") and not line.startswith("| L ")]


def test_training_gpu_smoke_times_both_sides(tmp_path):
    md = tmp_path / "t.md"
    r = _run("training_gpu.py", "--smoke", "--steps", "1", "--warmup", "1", "--md", str(md))
    assert r.returncode == 0, r.stderr[-2000:]
    mfu, *sparse_tables, geometry = md.read_text().split("### ")
    assert [t.split(",")[6].strip() for t in sparse_tables] == ["seq 32", "seq 64"]  # smoke: --sparse-seq 32,64
    assert [t.split(",")[7].split(";")[0].strip() for t in sparse_tables] == ["batch 2", "batch 1"]  # same tokens
    sparse = sparse_tables[0]
    rows = _table_rows(mfu)
    assert [row[0] for row in rows] == ["mlm", "clm"]
    for row in rows:
        ours, hf, ratio = float(row[1]), float(row[2]), float(row[3].rstrip("x"))
        assert ours > 0 and hf > 0 and ratio == pytest.approx(ours / hf, rel=0.02)
    assert "not a measurement" in mfu
    rows = [row for row in _table_rows(sparse) if row[0] != "attention"]
    assert [(row[0], row[1]) for row in rows] == [("dense", "no"), ("byte-sparse-8h", "no")]  # CPU: eager only
    dense = float(rows[0][2])
    for row in rows:
        assert float(row[3].rstrip("x")) == pytest.approx(float(row[2]) / dense, rel=0.02, abs=0.01)
        assert 0 < float(row[4]) < 10  # a byte-level loss near ln 256 at the start
    (row,) = [row for row in _table_rows(geometry) if row[0] != "training s"]
    train_s, geometry_s, first = float(row[0]), float(row[1]), float(row[3])
    later, n = row[4].split()
    assert geometry_s > 0 and first > 0 and n == "(2)" and row[6] == "no"  # smoke: scored at steps 0, 2 and 4
    assert first + 2 * float(later) == pytest.approx(geometry_s, abs=0.1 * geometry_s + 0.01)
    assert float(row[5].rstrip("%")) <= float(row[2].rstrip("%")) + 0.01  # the share without the first call


def test_sparse_gpu_smoke_checks_exactness_then_times(tmp_path):
    md = tmp_path / "s.md"
    r = _run("sparse_attention_gpu.py", "--smoke", "--md", str(md))
    assert r.returncode == 0, r.stderr[-2000:]
    text = md.read_text()
    assert "gathered (byte-sparse-8h): output and gradients within 2x dense SDPA's error" in text
    assert "| fwd (ms) | bwd (ms) | fwd+bwd (ms) | vs flash fwd | vs flash fwd+bwd | peak memory (MB) |" in text
    rows = _table_rows(text)
    assert {row[4] for row in rows} == {"attnscope gathered (byte-sparse-8h)", "flash causal SDPA (no pattern)"}
    flash = next(row for row in rows if row[4].startswith("flash"))
    for row in rows:
        fwd, bwd, total = float(row[6]), float(row[7]), float(row[8])
        assert fwd > 0 and total > 0 and bwd == pytest.approx(total - fwd, abs=0.011)
        assert float(row[10].rstrip("x")) == pytest.approx(float(flash[8]) / total, rel=0.02, abs=0.01)
        kept = int(row[3].split(" of ")[1])
        assert 0 <= int(row[3].split(" of ")[0]) <= kept


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
@pytest.mark.parametrize("script", ["training_gpu.py", "sparse_attention_gpu.py"])
def test_without_cuda_the_real_run_is_one_line_exit_2(script):
    r = _run(script)
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and "CUDA" in r.stderr


@pytest.mark.parametrize("script, args, flag", [
    ("training_gpu.py", ("--smoke", "--steps", "0"), "--steps"),  # was a StatisticsError after the warm-up steps
    ("training_gpu.py", ("--only", ","), "--only"),  # was an empty run, exit 0
    ("training_gpu.py", ("--smoke", "--md", "/proc/t.md"), "--md"),  # was a traceback after the whole run
    ("sparse_attention_gpu.py", ("--smoke", "--length", "0"), "--length"),  # was an IndexError
    ("sparse_attention_gpu.py", ("--repeats", "0"), "--repeats"),  # checked before the device, so also without CUDA
    ("sparse_attention_gpu.py", ("--sweep", "8192"), "--sweep 8192"),  # not a timed length: was skipped silently
    ("sparse_attention_gpu.py", ("--sweep-autotune",), "--sweep-autotune"),  # without --sweep: nothing autotuned
])
def test_a_bad_argument_is_one_line_exit_2_before_any_work(script, args, flag):
    r = _run(script, *args)
    assert r.returncode == 2, r.stderr[-2000:]
    assert len(r.stderr.strip().splitlines()) == 1 and flag in r.stderr and not r.stdout.strip()
