"""Comparing training runs: loss curves, speed-up over a baseline, geometry scores over training.

Owns the reading of run directories (``run.json`` + ``metrics.jsonl``) into tidy tables, the
speed-up metric of the symmetric-initialisation paper (``1 - step*/total``, step* = the first logged
step at which a run's training loss falls below its baseline's final loss; ``None`` = never), the
median / IQR of layer-level scores over layers per step, and the Markdown table. Figures are drawn by
:mod:`attnscope.plots.training` from these tables.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from attnscope.errors import FormatError, InputError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


@dataclass
class Run:
    """One run directory, read."""

    name: str
    path: Path
    config: dict[str, Any]
    records: list[dict[str, Any]]

    @property
    def objective(self) -> str:
        return str(self.config.get("objective", "?"))

    @property
    def init(self) -> str:
        return str(self.config.get("init", "?"))

    @property
    def model_key(self) -> tuple:
        m = self.config.get("model", {})
        return (self.objective, m.get("n_layers"), m.get("n_heads"), m.get("d_model"), self.config.get("data"))


def load_run(path: str | Path) -> Run:
    """Read ``run.json`` and ``metrics.jsonl`` of a run directory (one clear line when they are missing)."""
    path = Path(path)
    metrics = path / "metrics.jsonl"
    if not metrics.is_file():
        raise InputError(f"{path}: not a training run directory (no metrics.jsonl)")
    records = []
    for n, line in enumerate(metrics.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:
            raise FormatError(f"{metrics}: line {n} is not JSON") from None
    if not records:
        raise InputError(f"{metrics} is empty")
    config = json.loads((path / "run.json").read_text()) if (path / "run.json").is_file() else {}
    return Run(path.name, path, config, records)


def loss_table(runs: Sequence[Run]) -> "pd.DataFrame":
    """Tidy: run, objective, init, step, loss (training), eval_loss (NaN where not evaluated)."""
    import pandas as pd

    rows = [
        {"run": r.name, "objective": r.objective, "init": r.init, "step": rec["step"], "loss": rec.get("loss"),
         "eval_loss": rec.get("eval_loss")}
        for r in runs
        for rec in r.records
    ]
    return pd.DataFrame(rows).astype({"loss": float, "eval_loss": float})


def score_table(runs: Sequence[Run]) -> "pd.DataFrame":
    """Tidy: one score record per (run, logged step, layer/head), with run, objective, init, step."""
    import pandas as pd

    rows = []
    for r in runs:
        for rec in r.records:
            for g in rec.get("geometry", ()):
                rows.append({"run": r.name, "objective": r.objective, "init": r.init, "step": rec["step"], **g})
    if not rows:
        return pd.DataFrame(columns=["run", "objective", "init", "step", "stack", "level", "layer", "head",
                                     "symmetry", "directionality"])
    return pd.DataFrame(rows)


def score_summary(scores: "pd.DataFrame") -> "pd.DataFrame":
    """Median and quartiles over layers (layer-level rows) per run, stack and step."""
    import pandas as pd

    layer = scores[scores["level"] == "layer"]
    if layer.empty:
        return pd.DataFrame()
    keys = ["run", "objective", "init", "stack", "step"]
    out = layer.groupby(keys)[["symmetry", "directionality"]].quantile([0.25, 0.5, 0.75]).unstack()
    names = {0.25: "q1", 0.5: "median", 0.75: "q3"}
    out.columns = [f"{metric}_{names[q]}" for metric, q in out.columns]
    return out.reset_index()


def speedup(losses: "pd.DataFrame", baseline: "pd.DataFrame", smooth: int = 1) -> tuple[int | None, float | None]:
    """(step*, 1 - step*/total): first logged step (> 0) whose loss is below the baseline's final loss.

    ``smooth`` > 1 first replaces both curves by the mean of the last ``smooth`` logged losses (the
    paper's definition is ``smooth=1`` on losses logged every 200 steps; one lucky interval can decide it).
    """
    if smooth < 1:
        raise InputError(f"smooth must be at least 1, not {smooth}")

    def prep(df: "pd.DataFrame") -> "pd.DataFrame":
        df = df[df["step"] > 0].sort_values("step").copy()
        df["loss"] = df["loss"].rolling(smooth, min_periods=smooth).mean()
        return df.dropna(subset=["loss"])

    base, run = prep(baseline), prep(losses)
    if base.empty or run.empty:
        return None, None
    target = float(base["loss"].iloc[-1])
    below = run[run["loss"] < target]
    if below.empty:
        return None, None
    step_star = int(below["step"].iloc[0])
    total = int(run["step"].iloc[-1])
    return step_star, 1.0 - step_star / total


def pick_baselines(runs: Sequence[Run], baseline: str | None = None) -> dict[str, str]:
    """run name -> baseline run name: ``baseline`` if given, else the default-init run of the same model."""
    names = {r.name for r in runs}
    if baseline is not None:
        b = Path(baseline).name
        if b not in names:
            raise InputError(f"baseline {baseline!r} is not one of the compared runs")
        return {r.name: b for r in runs}
    out = {}
    for r in runs:
        same = [o for o in runs if o.model_key == r.model_key and o.init == "default"]
        out[r.name] = same[0].name if same else runs[0].name
    return out


def summary_table(runs: Sequence[Run], baseline: str | None = None, smooth: int = 1) -> "pd.DataFrame":
    """One row per run: final losses, baseline, speed-up, final median/IQR scores over layers."""
    import pandas as pd

    losses = loss_table(runs)
    summ = score_summary(score_table(runs))
    base_of = pick_baselines(runs, baseline)
    rows = []
    for r in runs:
        mine = losses[losses["run"] == r.name]
        base = losses[losses["run"] == base_of[r.name]]
        final = mine[mine["step"] > 0].sort_values("step")
        row: dict[str, Any] = {
            "run": r.name, "objective": r.objective, "init": r.init, "steps": int(mine["step"].max()),
            "final_loss": float(final["loss"].iloc[-1]) if len(final) else float("nan"),
            "final_eval_loss": float(mine.dropna(subset=["eval_loss"]).sort_values("step")["eval_loss"].iloc[-1])
            if mine["eval_loss"].notna().any() else float("nan"),
            "baseline": base_of[r.name],
        }
        bfin = base[base["step"] > 0].sort_values("step")
        row["baseline_final_loss"] = float(bfin["loss"].iloc[-1]) if len(bfin) else float("nan")
        if base_of[r.name] == r.name:
            row["step_star"], row["speedup"] = None, None
        else:
            row["step_star"], row["speedup"] = speedup(mine, base, smooth)
        s = summ[summ["run"] == r.name] if not summ.empty else summ
        if len(s):
            last = s.sort_values("step").iloc[-1]
            first = s.sort_values("step").iloc[0]
            row["stack"] = last["stack"]
            for m in ("symmetry", "directionality"):
                row[f"{m}_start"] = float(first[f"{m}_median"])
                for q in ("median", "q1", "q3"):
                    row[f"{m}_{q}"] = float(last[f"{m}_{q}"])
        rows.append(row)
    return pd.DataFrame(rows)


def markdown_table(summary: "pd.DataFrame") -> str:
    """The paper-style table: final loss baseline -> run, speed-up, final median [IQR] scores."""

    def f(x: Any, nd: int = 3) -> str:
        return "n/a" if x is None or x != x else f"{x:.{nd}f}"

    lines = [
        "| run | objective | init | steps | final train loss (baseline -> run) | speed-up | held-out loss "
        "| symmetry median [Q1, Q3] | directionality median [Q1, Q3] |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in summary.iterrows():
        if r["baseline"] == r["run"]:
            loss, sp = f"{f(r['final_loss'])} (baseline)", "-"
        else:
            loss = f"{f(r['baseline_final_loss'])} -> {f(r['final_loss'])}"
            sp = "none" if r["speedup"] is None or r["speedup"] != r["speedup"] else f"{100 * r['speedup']:.0f}%"
        sym = dirn = "n/a"
        if "symmetry_median" in r and r["symmetry_median"] == r["symmetry_median"]:
            sym = f"{f(r['symmetry_median'], 2)} [{f(r['symmetry_q1'], 2)}, {f(r['symmetry_q3'], 2)}]"
            dirn = f"{f(r['directionality_median'], 2)} [{f(r['directionality_q1'], 2)}, {f(r['directionality_q3'], 2)}]"
        lines.append(f"| {r['run']} | {r['objective']} | {r['init']} | {r['steps']} | {loss} | {sp} "
                     f"| {f(r['final_eval_loss'])} | {sym} | {dirn} |")
    return "\n".join(lines) + "\n"


def compare(
    run_dirs: Sequence[str | Path], out: str | Path | None = None, baseline: str | None = None, smooth: int = 1
) -> dict[str, Any]:
    """Read runs, build every table, and (with ``out``) write figures, CSVs and ``table.md`` there."""
    if not run_dirs:
        raise InputError("give at least one run directory")
    runs = [load_run(p) for p in run_dirs]
    if len({r.name for r in runs}) != len(runs):
        raise InputError("run directories must have distinct names")
    losses, scores = loss_table(runs), score_table(runs)
    summ = score_summary(scores)
    table = summary_table(runs, baseline, smooth)
    md = markdown_table(table)
    result = {"losses": losses, "scores": scores, "score_summary": summ, "summary": table, "markdown": md}
    if out is not None:
        from attnscope.plots import save_figure
        from attnscope.plots import training as plots
        from attnscope.tables import atomic_write_text, write_table

        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        write_table(table, out / "summary.csv")
        write_table(losses, out / "losses.csv")
        if not summ.empty:
            write_table(summ, out / "score_summary.csv")
        atomic_write_text(out / "table.md", md)
        files = [save_figure(plots.loss_curves(losses), out / "loss_curves.png")]
        if not summ.empty:
            files.append(save_figure(plots.score_medians(summ), out / "scores_median.png"))
            files.append(save_figure(plots.score_layers(scores), out / "scores_per_layer.png"))
        result["files"] = [str(p) for p in files]
    return result
