"""benchmarks/gpu_issue41.sh (the prepared GPU run) on CPU with a stand-in Python that only prints its arguments:
ONLY picks the steps, SPARSE_SEQ reaches the training benchmark, and the summary file is written."""

import os
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _script(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    stub = tmp_path / "python"
    stub.write_text('#!/bin/sh\necho "ran: $*"\n')
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    full = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHON": str(stub), "OUT": str(tmp_path / "out"), **env}
    return subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_issue41.sh")], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=120)


def _run(tmp_path: Path, **env: str) -> str:
    r = _script(tmp_path, **env)
    out = tmp_path / "out"
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


def test_spaces_in_only_are_ignored(tmp_path):
    """ONLY="sparse, train" once skipped the training step silently (" train" matched no key)."""
    log = _run(tmp_path, ONLY="sparse, train")
    ran = [line.split()[1] for line in log.splitlines() if line.startswith("ran: benchmarks/")]
    assert ran == ["benchmarks/sparse_attention_gpu.py", "benchmarks/training_gpu.py"]


@pytest.mark.parametrize("env, names", [({"ONLY": "sprase"}, "'sprase'"), ({"ONLY": "train,*"}, "'*'"),
                                        ({"ONLY": ","}, "ONLY names no step"), ({"T_ALL": "5m"}, "T_ALL")])
def test_a_bad_setting_is_one_line_exit_2_before_anything_runs(tmp_path, env, names):
    """A typo once ran nothing (or failed every step) and still wrote a summary with exit 0, on device time."""
    r = _script(tmp_path, **env)
    assert r.returncode == 2 and names in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert "ran:" not in r.stdout and not (tmp_path / "out").exists()


def test_a_failing_step_keeps_the_other_tables_and_exits_1(tmp_path):
    """A step that fails (or runs past its limit) does not stop the others; the summary is still written, and the
    exit status and one line on stderr name the step (it once exited 0 whatever failed)."""
    stub = tmp_path / "python"
    stub.write_text('#!/bin/sh\ncase "$*" in *"--only geometry"*) echo "boom"; exit 3 ;; esac\necho "ran: $*"\n')
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    full = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHON": str(stub), "OUT": str(tmp_path / "out"),
            "ONLY": "mfu,geometry"}
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_issue41.sh")], cwd=ROOT, env=full,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1] == "gpu_issue41.sh: failed or cut short: geometry logging (exit 3)"
    assert (tmp_path / "out" / "issue41.md").is_file()
    assert "ran: benchmarks/training_gpu.py --only mfu" in (tmp_path / "out" / "log.txt").read_text()


def test_the_screen_step_times_the_8b_shape_and_joins_the_summary(tmp_path):
    """Issue 51's interventions screen: the llama-3-8b shape on cuda, the 11 largest per intervention exact."""
    log = _run(tmp_path, ONLY="screen")
    ran = [line for line in log.splitlines() if line.startswith("ran: benchmarks/")]
    assert len(ran) == 1 and "interventions_screen.py --shape llama-3-8b --device cuda --exact 11" in ran[0]
    assert "(screen: not measured in this run; see log.txt)" in (tmp_path / "out" / "issue41.md").read_text()
