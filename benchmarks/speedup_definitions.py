"""The experiment of docs/training.md under both speed-up definitions, recomputed from its stored losses.

The run directories of the experiment are not kept; its every logged loss is (``losses.csv`` of
``attnscope compare --out``). This rebuilds minimal run directories from it (``run.json`` with
objective, init, seed and steps; ``metrics.jsonl`` with step, loss, eval_loss) and prints what
``attnscope compare`` says with ``--speedup matched`` (the default) and ``--speedup paper``. With
``--write DIR`` it also rewrites the comparison's tables there (``table.md``, ``summary.csv``,
``stats.csv``, ``curves.csv``, and the figures drawn from ``curves.csv``: ``loss_bands.png``,
``loss_differences.png``) as ``attnscope compare --out`` would today, the scores taken from
``DIR/score_summary.csv``. Usage::

    python benchmarks/speedup_definitions.py [--losses docs/figures/training/losses.csv] [--smooth 5]
        [--at 500,750,1000,1500] [--write docs/figures/training]

Rebuilt with ``--speedup paper --smooth 5``, the tables equal those the experiment wrote (checked
column by column against those stored at commit 29c5e1c), so the rebuild loses nothing the speed-up reads.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

import pandas as pd

from attnscope.plots import save_figure
from attnscope.plots import training as plots
from attnscope.tables import atomic_write_text, write_table
from attnscope.training.compare import compare, group_stats, load_run, loss_table, mean_curves, run_table, verdicts
from attnscope.training.compare_report import markdown


def rebuild(losses: pd.DataFrame, root: Path) -> list[Path]:
    """One run directory per run of ``losses`` (tidy: run, seed, objective, init, step, loss, eval_loss)."""
    dirs = []
    for run, df in losses.groupby("run", sort=False):
        d = root / run
        d.mkdir()
        first = df.iloc[0]
        config = {"objective": first["objective"], "init": first["init"], "seed": int(first["seed"]),
                  "steps": int(df["step"].max()), "model": {}}
        (d / "run.json").write_text(json.dumps(config))
        lines = []
        for _, r in df.sort_values("step").iterrows():
            rec = {"step": int(r["step"]), "loss": None if math.isnan(r["loss"]) else float(r["loss"])}
            if not math.isnan(r["eval_loss"]):
                rec["eval_loss"] = float(r["eval_loss"])
            lines.append(json.dumps(rec))
        (d / "metrics.jsonl").write_text("\n".join(lines) + "\n")
        dirs.append(d)
    return dirs


def write_tables(run_dirs: list[Path], folder: Path, smooth: int, at: list[int]) -> None:
    """The tables of ``attnscope compare --out folder`` (default speed-up), scores from folder/score_summary.csv."""
    runs = [load_run(d) for d in run_dirs]
    losses = loss_table(runs)
    table = run_table(runs, losses, smooth=smooth, summ=pd.read_csv(folder / "score_summary.csv"))
    stats = group_stats(table, losses, at)
    write_table(table, folder / "summary.csv")
    write_table(stats, folder / "stats.csv")
    curves = mean_curves(table, losses)
    write_table(curves, folder / "curves.csv")
    atomic_write_text(folder / "table.md", markdown(table, stats, verdicts(table, stats)))
    save_figure(plots.loss_bands(curves), folder / "loss_bands.png")
    differences = plots.loss_differences(curves)
    if differences is not None:
        save_figure(differences, folder / "loss_differences.png")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--losses", default="docs/figures/training/losses.csv")
    ap.add_argument("--smooth", type=int, default=5, help="smoothing of the training loss (the experiment used 5)")
    ap.add_argument("--at", default="500,750,1000,1500", help="steps of loss@S (the experiment's)")
    ap.add_argument("--write", default=None, help="rewrite the tables and the curve figures here")
    args = ap.parse_args()
    losses = pd.read_csv(args.losses)
    with tempfile.TemporaryDirectory() as tmp:
        runs = rebuild(losses, Path(tmp))
        for method, smooth in (("matched", args.smooth), ("paper", args.smooth), ("paper", 1)):
            res = compare(runs, smooth=smooth, speedup=method)
            print(f"## --speedup {method} --smooth {smooth}\n")
            sym = res.runs[res.runs["baseline"] != res.runs["run"]]
            for _, r in sym.iterrows():
                sp = "never" if r["speedup"] != r["speedup"] or r["speedup"] is None else f"{100 * r['speedup']:.1f}%"
                print(f"{r['run']}: {sp} (curve {r['curve']}, target {r['target']:.3f})")
            print()
            print(res.markdown.split("\n\n")[-1])
        if args.write:
            write_tables(runs, Path(args.write), args.smooth, [int(x) for x in args.at.split(",")])
            print(f"wrote table.md, summary.csv, stats.csv, curves.csv, loss_bands.png, loss_differences.png to "
                  f"{args.write}")


if __name__ == "__main__":
    main()
