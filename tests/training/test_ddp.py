"""DDP through torchrun (gloo, CPU, 2 processes) equals one process training on the same global batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

COMMON = ["train", "--objective", "clm", "--n-layers", "2", "--n-heads", "4", "--d-model", "32", "--d-ff", "64",
          "--dropout", "0", "--steps", "4", "--seq-len", "32", "--checkpoint-every", "4", "--score-every", "2",
          "--warmup", "1", "--seed", "3", "--no-progress", "--eval-windows", "4", "--threads", "1"]


@pytest.mark.slow
def test_torchrun_two_processes_match_one_process(tmp_path):
    from safetensors.torch import load_file

    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    ddp = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "attnscope",
         *COMMON, "--batch-size", "2", "--out", str(tmp_path / "ddp")],
        capture_output=True, text=True, env=env, timeout=600,
    )
    assert ddp.returncode == 0, ddp.stderr[-2000:]
    single = subprocess.run([sys.executable, "-m", "attnscope", *COMMON, "--batch-size", "4", "--out", str(tmp_path / "one")],
                            capture_output=True, text=True, env=env, timeout=600)
    assert single.returncode == 0, single.stderr[-2000:]
    summary = json.loads((tmp_path / "ddp" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["tokens"] == 4 * 4 * 32
    a = load_file(str(tmp_path / "ddp" / "checkpoints" / "step-4" / "model.safetensors"))
    b = load_file(str(tmp_path / "one" / "checkpoints" / "step-4" / "model.safetensors"))
    for k in a:
        torch.testing.assert_close(a[k], b[k], atol=2e-5, rtol=1e-4)
    la = [json.loads(x)["loss"] for x in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines()]
    lb = [json.loads(x)["loss"] for x in (tmp_path / "one" / "metrics.jsonl").read_text().splitlines()]
    assert la[1:] == pytest.approx(lb[1:], abs=1e-5)
