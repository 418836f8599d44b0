"""benchmarks/gpu_issue41.sh (the prepared GPU run) on CPU with a stand-in Python that only prints its arguments:
ONLY picks the steps, SPARSE_SEQ reaches the training benchmark, and the summary file is written."""

import os
import stat
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _run(tmp_path: Path, **env: str) -> str:
    stub = tmp_path / "python"
    stub.write_text('#!/bin/sh\necho "ran: $*"\n')
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    out = tmp_path / "out"
    full = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHON": str(stub), "OUT": str(out), **env}
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_issue41.sh")], cwd=ROOT, env=full,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert (out / "issue41.md").is_file()
    return (out / "log.txt").read_text()


def test_only_picks_the_steps_and_sparse_seq_reaches_the_training_table(tmp_path):
    log = _run(tmp_path, ONLY="train", SPARSE_SEQ="8192,16384")
    ran = [line for line in log.splitlines() if line.startswith("ran: benchmarks/")]
    assert len(ran) == 1 and "training_gpu.py --only sparse" in ran[0] and "--sparse-seq 8192,16384" in ran[0]


def test_the_default_length_and_the_other_half(tmp_path):
    log = _run(tmp_path, ONLY="mfu,geometry")
    ran = [line.split()[1:4] for line in log.splitlines() if line.startswith("ran: benchmarks/")]
    assert ran == [["benchmarks/training_gpu.py", "--only", "mfu"], ["benchmarks/training_gpu.py", "--only", "geometry"]]
    log = _run(tmp_path, ONLY="train")
    assert "--sparse-seq 8192 " in log
