"""The training-lab experiment: encoder (mlm) and decoder (clm), default vs symmetric init, same budget.

Runs four ``attnscope train`` jobs on the builtin corpus (two at a time, one torch thread each,
under ``nice``), then ``attnscope compare`` on them, writing figures and the table to
docs/figures/training/ (or --figures). Usage::

    python benchmarks/training_experiment.py [--steps 500] [--runs runs/experiment] [--parallel 2]

Sizes are small on purpose (a shared 2-core CPU): 4 layers, 4 heads, d_model 128, FFN 512, byte
tokens, sequences of 64, batch 16. Everything else is the trainer's default unless set below.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

MODEL = ["--n-layers", "4", "--n-heads", "4", "--d-model", "128", "--d-ff", "512"]


def command(objective: str, init: str, out: Path, steps: int) -> list[str]:
    return [
        "nice", "-n", "10", sys.executable, "-m", "attnscope", "train", *MODEL,
        "--objective", objective, "--init", init, "--data", "builtin", "--tokenizer", "bytes",
        "--steps", str(steps), "--batch-size", "16", "--seq-len", "64", "--lr", "1e-3", "--warmup", "50",
        "--seed", "0", "--score-every", "25", "--log-every", "10", "--eval-every", "100",
        "--checkpoint-every", str(max(steps // 2, 1)), "--eval-windows", "64", "--threads", "1",
        "--no-progress", "--out", str(out),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--runs", default="runs/experiment")
    ap.add_argument("--parallel", type=int, default=2)
    ap.add_argument("--figures", default="docs/figures/training")
    args = ap.parse_args()
    root = Path(args.runs)
    jobs = [(obj, init) for obj in ("mlm", "clm") for init in ("default", "symmetric")]
    pending = [(f"{'encoder' if o == 'mlm' else 'decoder'}-{i}", command(o, i, root / f"{'encoder' if o == 'mlm' else 'decoder'}-{i}", args.steps)) for o, i in jobs]
    running: list[tuple[str, subprocess.Popen, float]] = []
    t_start = time.time()
    while pending or running:
        while pending and len(running) < args.parallel:
            name, cmd = pending.pop(0)
            if (root / name / "summary.json").is_file():
                print(f"{name}: done already", flush=True)
                continue
            log = open(root.parent / f"{root.name}-{name}.log", "w") if root.parent.exists() else subprocess.DEVNULL
            running.append((name, subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT), time.time()))
            print(f"{name}: started", flush=True)
        for item in list(running):
            name, proc, t0 = item
            if proc.poll() is not None:
                running.remove(item)
                print(f"{name}: exit {proc.returncode} after {time.time() - t0:.0f} s", flush=True)
        time.sleep(2)
    print(f"all runs done in {time.time() - t_start:.0f} s", flush=True)
    runs = [str(root / n) for n in ("encoder-default", "encoder-symmetric", "decoder-default", "decoder-symmetric")]
    subprocess.run([sys.executable, "-m", "attnscope", "compare", *runs, "--out", args.figures], check=True)


if __name__ == "__main__":
    main()
