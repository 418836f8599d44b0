"""The training-lab experiment: does symmetric initialisation speed up encoder training, and how sure are we?

One grid through ``attnscope train --seeds``: objectives {mlm (encoder), clm (decoder)} x inits
{default, symmetric} x seeds, every point an ordinary run directory, run by the local executor
(``--workers`` processes, one torch thread each, under ``nice``; resumable: rerun the same command after
a kill). Then ``attnscope compare`` over all runs: paired speed-up per seed, mean and 95% interval over
seeds, curves with bands, written to ``--figures``. Usage::

    python benchmarks/prepare_text.py --out data/text          # Shakespeare, offline afterwards
    python benchmarks/training_experiment.py [--steps 1500] [--seeds 0,1,2] [--runs runs/experiment]

Sizes are small on purpose (a shared 2-core CPU): 4 layers, 4 heads, d_model 128, FFN 512 (0.8 M
parameters), byte tokens, sequences of 128, batch 16. Everything else is the trainer's default.
On a GPU, pass ``--device cuda --workers 1`` and larger ``--steps`` / ``--model`` options after ``--``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

MODEL = ["--n-layers", "4", "--n-heads", "4", "--d-model", "128", "--d-ff", "512"]


def train_command(args: argparse.Namespace, extra: list[str]) -> list[str]:
    """The one ``attnscope train`` call that runs the whole grid."""
    steps = args.steps
    return [
        "nice", "-n", "10", sys.executable, "-m", "attnscope", "train", *MODEL,
        "--data", args.data, "--tokenizer", "bytes",
        "--steps", str(steps), "--batch-size", "16", "--seq-len", "128", "--lr", "1e-3",
        "--warmup", str(max(steps // 15, 1)), "--score-every", "50", "--log-every", "10",
        "--eval-every", str(max(steps // 6, 1)), "--checkpoint-every", str(max(steps // 3, 1)),
        "--eval-windows", "64", "--no-progress",
        "--seeds", args.seeds, "--inits", "default,symmetric", "--objectives", "mlm,clm",
        "--executor", "local", "--workers", str(args.workers), "--device", args.device,
        *extra, "--out", args.runs,
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1500)
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--data", default="data/text/shakespeare")
    ap.add_argument("--runs", default="runs/experiment")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--at", default=None, help="report the loss at these steps (default: 1/3, 2/3 of --steps)")
    ap.add_argument("--figures", default="docs/figures/training")
    args, extra = ap.parse_known_args()
    extra = [x for x in extra if x != "--"]
    if not Path(args.data).exists() and args.data != "builtin":
        sys.exit(f"training_experiment: {args.data} not found: run python benchmarks/prepare_text.py --out data/text")
    t0 = time.time()
    subprocess.run(train_command(args, extra), check=True)
    print(f"grid done in {time.time() - t0:.0f} s", flush=True)
    at = args.at or f"{args.steps // 3},{2 * args.steps // 3}"
    runs = sorted(str(p) for p in Path(args.runs).iterdir() if (p / "run.json").is_file())
    subprocess.run([sys.executable, "-m", "attnscope", "compare", *runs, "--at", at, "--smooth", "5",
                    "--out", args.figures], check=True)


if __name__ == "__main__":
    main()
