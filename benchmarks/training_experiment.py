"""The training-lab experiment: does symmetric initialisation speed up encoder training, and how sure are we?

Two grids through ``attnscope train --seeds``: encoders (mlm) and decoders (clm), each init in {default,
symmetric} x seeds, every point an ordinary run directory under ``--runs``/{mlm,clm}/, run by the local
executor (``--workers`` processes, one torch thread each, under ``nice``; resumable: rerun the same command
after a kill). Then ``attnscope compare`` over all runs: paired speed-up per seed, mean and 95% interval
over seeds, curves with bands, written to ``--figures``. Usage::

    python benchmarks/prepare_text.py --out data/text          # Shakespeare, offline afterwards
    python benchmarks/training_experiment.py [--mlm-steps 2000] [--clm-steps 1000] [--mlm-seeds 0-5]

Sizes are small on purpose (a shared 2-core CPU): 4 layers, 4 heads, d_model 128, FFN 512 (0.8 M
parameters), learned positions like BERT, pre-LN, no dropout, byte tokens, batch 32 x 64, AdamW lr 2e-3.
(Post-LN at lr 1e-3 with dropout 0.1 stayed on the unigram plateau, loss ~3.0 nats, for all 1500 steps of
a first attempt, default and symmetric alike: no test of the question.) Extra ``attnscope train`` options
go after ``--``; on a GPU, e.g. ``-- --device cuda``.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

MODEL = ["--n-layers", "4", "--n-heads", "4", "--d-model", "128", "--d-ff", "512", "--pos", "learned",
         "--norm", "pre", "--dropout", "0"]


def train_command(args: argparse.Namespace, objective: str, steps: int, seeds: str, extra: list[str]) -> list[str]:
    """The one ``attnscope train`` call that runs one objective's grid (inits x seeds)."""
    return [
        "nice", "-n", "10", sys.executable, "-m", "attnscope", "train", *MODEL,
        "--data", args.data, "--tokenizer", "bytes",
        "--steps", str(steps), "--batch-size", "32", "--seq-len", "64", "--lr", "2e-3",
        "--warmup", "50", "--score-every", "50", "--log-every", "10",
        "--eval-every", str(max(steps // 8, 1)), "--checkpoint-every", str(max(steps // 4, 1)),
        "--eval-windows", "128", "--no-progress",
        "--seeds", seeds, "--inits", "default,symmetric", "--objectives", objective,
        "--executor", "local", "--workers", str(args.workers), *extra, "--out", str(Path(args.runs) / objective),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mlm-steps", type=int, default=2000)
    ap.add_argument("--clm-steps", type=int, default=1000)
    ap.add_argument("--mlm-seeds", default="0-5", help="encoder seeds (the question; six for tighter intervals)")
    ap.add_argument("--clm-seeds", default="0-2")
    ap.add_argument("--data", default="data/text/shakespeare")
    ap.add_argument("--runs", default="runs/experiment")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--at", default="500,750,1000,1500", help="also report the loss at these steps")
    ap.add_argument("--figures", default="docs/figures/training")
    args, extra = ap.parse_known_args()
    extra = [x for x in extra if x != "--"]
    if not Path(args.data).exists() and args.data != "builtin":
        sys.exit(f"training_experiment: {args.data} not found: run python benchmarks/prepare_text.py --out data/text")
    for objective, steps, seeds in (("mlm", args.mlm_steps, args.mlm_seeds), ("clm", args.clm_steps, args.clm_seeds)):
        t0 = time.time()
        subprocess.run(train_command(args, objective, steps, seeds, extra), check=True)
        print(f"{objective} grid done in {time.time() - t0:.0f} s", flush=True)
    runs = sorted(str(p) for p in Path(args.runs).glob("*/*") if (p / "run.json").is_file())
    subprocess.run([sys.executable, "-m", "attnscope", "compare", *runs, "--at", args.at, "--smooth", "5",
                    "--out", args.figures], check=True)


if __name__ == "__main__":
    main()
