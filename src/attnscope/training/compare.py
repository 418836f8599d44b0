"""Comparing training runs over seeds: paired speed-ups, intervals over seeds, loss curves, scores.

Owns the reading of run directories (``run.json`` + ``metrics.jsonl``, hostile files answered in one
line) into tidy tables and the statistics of an experiment:

* **groups**: runs whose resolved configurations agree on everything but the seed (and the fields
  that do not change what is trained: output path, logging, device, ...);
* **paired baseline**: a run's baseline is the default-init run (``init: default``, no ``tie_qk``)
  with the same configuration otherwise *and the same seed*;
* per run: the steps to reach a target loss (default: its baseline's final loss) and the speed-up of
  the symmetric-initialisation paper, ``1 - step*/total`` (step* = the first logged step whose training
  loss is below the target; never reached = no value). With an explicit ``target`` the speed-up is
  ``1 - step*(run) / step*(baseline)``;
* per group and metric: mean and 95% t-interval over seeds (one seed: a note, no interval);
* curves: the mean training / held-out loss over the seeds of a group with its 95% band.

Nothing here draws or writes: :func:`compare` returns a :class:`Comparison` of DataFrames; figures are
drawn by :mod:`attnscope.plots.training` and written by the CLI.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from attnscope.errors import FormatError, InputError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

# configuration fields that do not change what is trained (left out when grouping and pairing)
NOT_COMPARED = frozenset({
    "out", "resume", "progress", "threads", "wandb", "tensorboard", "config", "device", "world_size",
    "keep_checkpoints", "checkpoint_every", "score_every", "score_offsets", "log_every", "eval_every",
})
TREATMENTS = ("init", "tie_qk", "model.tie_qk")  # what a baseline differs in
LEVEL = 0.95


@dataclass
class Run:
    """One run directory, read."""

    name: str
    path: Path
    config: dict[str, Any]
    records: list[dict[str, Any]]
    notes: list[str] = field(default_factory=list)

    @property
    def objective(self) -> str:
        return str(self.config.get("objective", "?"))

    @property
    def init(self) -> str:
        return str(self.config.get("init", "?"))

    @property
    def seed(self) -> Any:
        return self.config.get("seed")

    @property
    def total_steps(self) -> int | None:
        """The configured ``steps`` of run.json (None where it has none)."""
        return self.config.get("steps")

    @property
    def last_step(self) -> int:
        """The last logged step."""
        return max(rec["step"] for rec in self.records)

    @property
    def is_default(self) -> bool:
        """A default-init run (the baseline kind): ``init: default`` and W_q, W_k not tied."""
        return self.init == "default" and not self.config.get("tie_qk") and not self.config.get("model", {}).get("tie_qk")

    def settings(self) -> dict[str, str]:
        """Flattened comparable configuration (``model.*`` nested keys), values as JSON text."""
        flat: dict[str, Any] = {}
        for k, v in self.config.items():
            if k == "model" and isinstance(v, dict):
                flat.update({f"model.{mk}": mv for mk, mv in v.items()})
            else:
                flat[k] = v
        return {k: json.dumps(v, sort_keys=True) for k, v in flat.items() if k not in NOT_COMPARED}

    def group_key(self) -> tuple:
        return tuple(sorted((k, v) for k, v in self.settings().items() if k != "seed"))

    def pair_key(self) -> tuple:
        return tuple(sorted((k, v) for k, v in self.settings().items() if k not in TREATMENTS))


def load_run(path: str | Path) -> Run:
    """Read a run directory; a torn last line of ``metrics.jsonl`` is ignored with a note, an unfinished
    run (last logged step below run.json's ``steps``) gets a note, anything else wrong is one clear error."""
    path = Path(path)
    if not path.is_dir():
        raise InputError(f"{path}: not a directory (give run directories written by attnscope train)")
    metrics, conf = path / "metrics.jsonl", path / "run.json"
    for f in (metrics, conf):
        if not f.is_file():
            raise InputError(f"{path}: not a training run directory (no {f.name})")
    try:
        config = json.loads(conf.read_text())
    except OSError as exc:
        raise InputError(f"{conf}: cannot read it ({exc.strerror})") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise FormatError(f"{conf}: not valid JSON ({exc.__class__.__name__}); the run's configuration is lost") from None
    if not isinstance(config, dict) or not isinstance(config.get("model", {}), dict):
        raise FormatError(f"{conf}: not a run configuration (expected a JSON object with a 'model' object)")
    total = config.get("steps")
    if total is not None and (not _is_int(total) or total < 1):
        raise FormatError(f"{conf}: steps {total!r} is not a positive integer")
    try:
        lines = metrics.read_text().splitlines()
    except OSError as exc:
        raise InputError(f"{metrics}: cannot read it ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise FormatError(f"{metrics}: not UTF-8 text") from None
    numbered = [(n, ln) for n, ln in enumerate(lines, 1) if ln.strip()]
    records, notes, line_of = [], [], {}
    for i, (n, line) in enumerate(numbered):
        try:
            rec = json.loads(line)
        except ValueError:
            if i == len(numbered) - 1:  # a crash mid-write leaves a partial last line
                notes.append(f"{metrics}: ignored the torn last line {n}")
                continue
            raise FormatError(f"{metrics}: line {n} is not JSON") from None
        if not isinstance(rec, dict) or not _is_int(rec.get("step")):
            raise FormatError(f"{metrics}: line {n} is not a metrics record (needs an integer 'step')")
        problem = _record_problem(rec, total, line_of)
        if problem:
            raise FormatError(f"{metrics}: line {n}: {problem}")
        line_of[rec["step"]] = n
        records.append(rec)
    if not records:
        raise InputError(f"{metrics} holds no records")
    records.sort(key=lambda rec: rec["step"])  # steps are unique, so this order is the training order
    run = Run(path.name, path, config, records, notes)
    if total is not None and run.last_step < total:
        notes.append(f"run {run.name} is unfinished: logged {run.last_step} of its {total} steps")
    return run


#: the losses a record may hold: cross-entropies, so finite and non-negative (null: nothing was labelled)
LOSS_KEYS = ("loss", "eval_loss")
SCORE_KEYS = ("symmetry", "directionality")


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value: int | float) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer too large for a float
        return False


def _record_problem(rec: dict[str, Any], total: int | None, line_of: dict[int, int]) -> str | None:
    """What makes ``rec`` something the trainer never writes (None if nothing): a step that is negative,
    beyond the run's ``total`` steps or already seen (``line_of``: step -> line), a loss that is not a
    finite non-negative number, a score that is not a finite number."""
    step = rec["step"]
    if step < 0:
        return f"step {step} is negative"
    if total is not None and step > total:
        return f"step {step} is beyond the run's {total} steps"
    if step in line_of:
        return f"step {step} appears twice (also on line {line_of[step]})"
    for key in LOSS_KEYS:
        value = rec.get(key)
        if value is None:
            continue
        if not _is_number(value):
            return f"{key} {value!r} is not a number"
        if not (_finite(value) and value >= 0):
            return f"{key} {value!r} is not a finite non-negative number"
    geometry = rec.get("geometry", [])
    if not isinstance(geometry, list) or not all(isinstance(g, dict) for g in geometry):
        return "geometry is not a list of score records"
    for g in geometry:
        for key in SCORE_KEYS:
            value = g.get(key)
            if value is not None and not (_is_number(value) and _finite(value)):
                return f"{key} score {value!r} is not a finite number"
    return None


# --------------------------------------------------------------------------- per-run tables


def loss_table(runs: Sequence[Run]) -> "pd.DataFrame":
    """Tidy: run, seed, objective, init, step, loss (training), eval_loss (NaN where not evaluated)."""
    import pandas as pd

    rows = [
        {"run": r.name, "seed": r.seed, "objective": r.objective, "init": r.init, "step": rec["step"],
         "loss": rec.get("loss"), "eval_loss": rec.get("eval_loss")}
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


def _curve(losses: "pd.DataFrame", smooth: int) -> "pd.DataFrame":
    """Training steps (> 0) with a loss, sorted, the loss replaced by the mean of the last ``smooth``."""
    if smooth < 1:
        raise InputError(f"smooth must be at least 1, not {smooth}")
    df = losses[losses["step"] > 0].dropna(subset=["loss"]).sort_values("step").copy()
    df["loss"] = df["loss"].rolling(smooth, min_periods=smooth).mean()
    return df.dropna(subset=["loss"])


def steps_to(losses: "pd.DataFrame", target: float, smooth: int = 1) -> int | None:
    """The first logged step (> 0) whose (smoothed) training loss is below ``target``; None = never."""
    run = _curve(losses, smooth)
    below = run[run["loss"] < target]
    return int(below["step"].iloc[0]) if len(below) else None


def speedup(losses: "pd.DataFrame", baseline: "pd.DataFrame", smooth: int = 1) -> tuple[int | None, float | None]:
    """(step*, 1 - step*/total): first logged step (> 0) whose loss is below the baseline's final loss.

    ``smooth`` > 1 first replaces both curves by the mean of the last ``smooth`` logged losses (the
    paper's definition is ``smooth=1`` on losses logged every 200 steps; one lucky interval can decide it).
    """
    base, run = _curve(baseline, smooth), _curve(losses, smooth)
    if base.empty or run.empty:
        return None, None
    step_star = steps_to(losses, float(base["loss"].iloc[-1]), smooth)
    if step_star is None:
        return None, None
    return step_star, 1.0 - step_star / int(run["step"].iloc[-1])


def loss_at(losses: "pd.DataFrame", step: int, column: str = "loss") -> float:
    """The logged ``column`` at ``step``, linearly interpolated between logged steps (> 0); NaN outside."""
    import numpy as np

    df = losses[losses["step"] > 0].dropna(subset=[column]).sort_values("step")
    if df.empty or not df["step"].iloc[0] <= step <= df["step"].iloc[-1]:
        return math.nan
    return float(np.interp(step, df["step"], df[column]))


def _final(losses: "pd.DataFrame", column: str) -> float:
    df = losses[losses["step"] > 0].dropna(subset=[column]).sort_values("step")
    return float(df[column].iloc[-1]) if len(df) else math.nan


def pick_baselines(runs: Sequence[Run], baseline: str | None = None) -> dict[str, str]:
    """run name -> baseline run name: ``baseline`` for every run if given, else the paired default-init
    run (same configuration but the init, same seed). A run without one is an error."""
    names = {r.name for r in runs}
    if baseline is not None:
        b = Path(baseline).name
        if b not in names:
            raise InputError(f"baseline {baseline!r} is not one of the compared runs")
        return {r.name: b for r in runs}
    defaults = {r.pair_key(): r for r in runs if r.is_default}
    out = {}
    for r in runs:
        b = defaults.get(r.pair_key())
        if b is None:
            raise InputError(
                f"run {r.name} (init {r.init}, seed {r.seed}) has no default-init run with the same objective, "
                "model, data and seed among the compared runs; add it or name one with --baseline"
            )
        out[r.name] = b.name
    return out


#: model settings that follow from the objective (mlm: bidirectional + a [MASK] token; clm: causal)
OBJECTIVE_IMPLIES = ("model.causal", "model.vocab_size")


def group_labels(runs: Sequence[Run]) -> dict[str, str]:
    """run name -> group label: the settings that differ between groups (``init=symmetric objective=clm``)."""
    keys = {r.name: dict(r.group_key()) for r in runs}
    distinct = list(dict.fromkeys(tuple(sorted(k.items())) for k in keys.values()))
    varying = sorted({k for a in distinct for k, v in a for b in distinct if dict(b).get(k) != v})
    if "objective" in varying:  # what the objective sets itself (causal mask, the [MASK] token) says nothing more
        varying = [k for k in varying if k not in OBJECTIVE_IMPLIES]
    out = {}
    for r in runs:
        if varying:
            out[r.name] = " ".join(f"{k}={_plain(keys[r.name].get(k, 'null'))}" for k in varying)
        else:
            out[r.name] = f"{r.objective}/{r.init}"
    return out


def _plain(text: str) -> str:
    value = json.loads(text)
    return value if isinstance(value, str) else text


def run_table(
    runs: Sequence[Run], losses: "pd.DataFrame", baseline: str | None = None, smooth: int = 1,
    target: float | None = None, summ: "pd.DataFrame | None" = None,
) -> "pd.DataFrame":
    """One row per run: group, seed, last logged and configured steps, final losses, paired baseline,
    whether the pair is comparable (``paired``: both end at the same step), target, steps to it, speed-up,
    scores. A pair that ends at different steps has no speed-up (and no step* for the baseline's target)."""
    import pandas as pd

    base_of = pick_baselines(runs, baseline)
    label = group_labels(runs)
    end = {r.name: r.last_step for r in runs}
    by_run = {name: df for name, df in losses.groupby("run", sort=False)}
    rows = []
    for r in runs:
        mine, base = by_run[r.name], by_run[base_of[r.name]]
        is_base = base_of[r.name] == r.name
        paired = end[r.name] == end[base_of[r.name]]
        row: dict[str, Any] = {
            "run": r.name, "group": label[r.name], "seed": r.seed, "objective": r.objective, "init": r.init,
            "steps": end[r.name], "total_steps": r.total_steps, "final_loss": _final(mine, "loss"),
            "final_eval_loss": _final(mine, "eval_loss"), "baseline": base_of[r.name], "paired": paired,
            "baseline_final_loss": _final(base, "loss"),
        }
        base_curve = _curve(base, smooth)
        row["target"] = target if target is not None else (
            float(base_curve["loss"].iloc[-1]) if len(base_curve) else math.nan
        )
        step_star = None
        if target is not None or (paired and not is_base):
            step_star = steps_to(mine, row["target"], smooth) if row["target"] == row["target"] else None
        row["step_star"] = step_star
        sp = None
        if paired and not is_base and step_star is not None:
            if target is None:
                sp = 1.0 - step_star / int(_curve(mine, smooth)["step"].iloc[-1])
            else:
                base_star = steps_to(base, target, smooth)
                sp = None if base_star is None else 1.0 - step_star / base_star
        row["speedup"] = sp
        s = summ[summ["run"] == r.name] if summ is not None and not summ.empty else None
        if s is not None and len(s):
            s = s.sort_values("step")
            last, first = s.iloc[-1], s.iloc[0]
            row["stack"] = last["stack"]
            for m in ("symmetry", "directionality"):
                row[f"{m}_start"] = float(first[f"{m}_median"])
                for q in ("median", "q1", "q3"):
                    row[f"{m}_{q}"] = float(last[f"{m}_{q}"])
        rows.append(row)
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- over seeds


def t_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float, float, float]:
    """(mean, sd, low, high): the Student-t interval of the mean; sd and bounds NaN for one value."""
    import numpy as np
    from scipy import stats

    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return math.nan, math.nan, math.nan, math.nan
    mean = float(x.mean())
    if x.size < 2:
        return mean, math.nan, math.nan, math.nan
    sd = float(x.std(ddof=1))
    half = float(stats.t.ppf(0.5 + level / 2, x.size - 1)) * sd / math.sqrt(x.size)
    return mean, sd, mean - half, mean + half


def group_stats(table: "pd.DataFrame", losses: "pd.DataFrame", at: Sequence[int] = ()) -> "pd.DataFrame":
    """Tidy: group, objective, init, metric, n_runs, n, mean, sd, ci_low, ci_high (95% t-interval).

    Metrics: ``final_loss``, ``final_eval_loss``, ``loss@S`` for each step in ``at``, ``steps_to_target``
    and ``speedup`` (the last two for runs that have them), and for runs with a paired baseline the paired
    differences run minus baseline of the same seed: ``dloss@S`` and ``dfinal_eval_loss`` (negative = the
    run is ahead; pairing removes the seed's own noise, so these intervals are the tight ones). A metric
    is summarised only when every seed of the group has a value (``n == n_runs``); otherwise ``n`` says
    how many did and the mean is NaN (a seed that never reached the target cannot be averaged away).

    The paired metrics (``steps_to_target``, ``speedup``, the differences) leave out the pairs that end
    at different steps (``paired`` False in ``table``; for ``dloss@S`` only where S is beyond one of
    them): ``n_runs`` counts the pairs kept.
    """
    import pandas as pd

    by_run = {name: df for name, df in losses.groupby("run", sort=False)}
    final_eval = dict(zip(table["run"], table["final_eval_loss"]))
    last = dict(zip(table["run"], table["steps"]))
    rows = []
    for g, part in table.groupby("group", sort=False):
        # a value per run; NaN = the run has none (counts against the group), None = its pair is left out
        metrics: dict[str, list[float | None]] = {
            "final_loss": list(part["final_loss"]), "final_eval_loss": list(part["final_eval_loss"]),
        }
        for s in at:
            metrics[f"loss@{s}"] = [loss_at(by_run[r], int(s)) for r in part["run"]]
        is_base = bool((part["baseline"] == part["run"]).all())
        paired = list(part["paired"])
        if not (is_base and part["step_star"].isna().all()):
            metrics["steps_to_target"] = _kept(part["step_star"], paired)
        if not is_base:
            metrics["speedup"] = _kept(part["speedup"], paired)
            pairs = list(zip(part["run"], part["baseline"]))
            for s in at:
                reached = [ok or int(s) <= min(last[r], last[b]) for ok, (r, b) in zip(paired, pairs)]
                metrics[f"dloss@{s}"] = _kept([loss_at(by_run[r], int(s)) - loss_at(by_run[b], int(s))
                                               for r, b in pairs], reached)
            metrics["dfinal_eval_loss"] = _kept([final_eval[r] - final_eval[b] for r, b in pairs], paired)
        for metric, all_vals in metrics.items():
            vals = [v for v in all_vals if v is not None]
            finite = [v for v in vals if v == v]
            if not vals or (not finite and metric == "final_eval_loss"):
                continue
            complete = len(finite) == len(vals)
            mean, sd, lo, hi = t_interval(finite) if complete else (math.nan,) * 4
            rows.append({"group": g, "objective": part["objective"].iloc[0], "init": part["init"].iloc[0],
                         "metric": metric, "n_runs": len(vals), "n": len(finite), "mean": mean, "sd": sd,
                         "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows)


def _kept(values: Sequence[Any], keep: Sequence[bool]) -> list[float | None]:
    """``values`` as floats (None, NaN: no value -> NaN) where ``keep``, else None (left out)."""
    return [(math.nan if v is None else float(v)) if k else None for v, k in zip(values, keep)]


def mean_curves(table: "pd.DataFrame", losses: "pd.DataFrame") -> "pd.DataFrame":
    """Tidy: group, objective, init, metric, step, n, mean, ci_low, ci_high.

    Metrics: ``loss`` and ``eval_loss`` (mean over the group's seeds), and for groups with a paired
    baseline ``dloss`` and ``deval_loss``, the run minus its same-seed baseline at the same step. Only
    steps (> 0) logged by every run of the group (and its baselines) are kept, so each point averages
    all its seeds.
    """
    import pandas as pd

    rows = []
    group_of = dict(zip(table["run"], table["group"]))
    df = losses[losses["step"] > 0].assign(group=losses["run"].map(group_of))
    base_of = dict(zip(table["run"], table["baseline"]))
    base = (df[["run", "step", "loss", "eval_loss"]].drop_duplicates(["run", "step"], keep="last")
            .rename(columns={"run": "baseline", "loss": "base_loss", "eval_loss": "base_eval_loss"}))
    paired = df.assign(baseline=df["run"].map(base_of))
    paired = paired[paired["baseline"] != paired["run"]].merge(base, on=["baseline", "step"], how="left")
    paired = paired.assign(dloss=paired["loss"] - paired["base_loss"],
                           deval_loss=paired["eval_loss"] - paired["base_eval_loss"])
    paired = paired[["run", "group", "objective", "init", "step", "dloss", "deval_loss"]]
    for g, part in pd.concat([df, paired], ignore_index=True).groupby("group", sort=False):
        n_runs = part["run"].nunique()
        for metric in ("loss", "eval_loss", "dloss", "deval_loss"):
            sub = part.dropna(subset=[metric])
            for step, at_step in sub.groupby("step"):
                if at_step["run"].nunique() != n_runs:
                    continue
                mean, _, lo, hi = t_interval(at_step[metric].to_numpy())
                rows.append({"group": g, "objective": part["objective"].iloc[0], "init": part["init"].iloc[0],
                             "metric": metric, "step": int(step), "n": n_runs, "mean": mean, "ci_low": lo,
                             "ci_high": hi})
    cols = ["group", "objective", "init", "metric", "step", "n", "mean", "ci_low", "ci_high"]
    return pd.DataFrame(rows, columns=cols)


# --------------------------------------------------------------------------- report


def _f(x: Any, nd: int = 3) -> str:
    return "n/a" if x is None or x != x else f"{x:.{nd}f}"


def markdown_table(summary: "pd.DataFrame") -> str:
    """Per run: final loss baseline -> run, speed-up, held-out loss, final median [IQR] scores."""
    lines = [
        "| run | seed | objective | init | steps | final train loss (baseline -> run) | speed-up | held-out loss "
        "| symmetry median [Q1, Q3] | directionality median [Q1, Q3] |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in summary.iterrows():
        if r["baseline"] == r["run"]:
            loss, sp = f"{_f(r['final_loss'])} (baseline)", "-"
        else:
            loss = f"{_f(r['baseline_final_loss'])} -> {_f(r['final_loss'])}"
            sp = "none" if r["speedup"] is None or r["speedup"] != r["speedup"] else f"{100 * r['speedup']:.0f}%"
            if not r["paired"]:
                sp = "n/a (unpaired)"
        total = r["total_steps"]
        steps = r["steps"] if total is None or total != total or r["steps"] == total else f"{r['steps']} of {int(total)}"
        sym = dirn = "n/a"
        if "symmetry_median" in r and r["symmetry_median"] == r["symmetry_median"]:
            sym = f"{_f(r['symmetry_median'], 2)} [{_f(r['symmetry_q1'], 2)}, {_f(r['symmetry_q3'], 2)}]"
            dirn = f"{_f(r['directionality_median'], 2)} [{_f(r['directionality_q1'], 2)}, {_f(r['directionality_q3'], 2)}]"
        seed = "-" if r["seed"] is None or r["seed"] != r["seed"] else r["seed"]
        lines.append(f"| {r['run']} | {seed} | {r['objective']} | {r['init']} | {steps} | {loss} | {sp} "
                     f"| {_f(r['final_eval_loss'])} | {sym} | {dirn} |")
    return "\n".join(lines) + "\n"


def markdown_stats(stats: "pd.DataFrame") -> str:
    """Per group: one column per metric, ``mean [95% CI]`` (``mean (1 seed)``; ``k/n seeds`` if incomplete;
    ``(k of n pairs)`` after a paired metric that left pairs out)."""
    if stats.empty:
        return ""
    metrics = list(dict.fromkeys(stats["metric"]))
    lines = ["| group | seeds | " + " | ".join(metrics) + " |", "|---|---|" + "---|" * len(metrics)]
    for g, part in stats.groupby("group", sort=False):
        cells = []
        by_metric = part.set_index("metric")
        seeds = int(by_metric.loc["final_loss", "n_runs"])
        for m in metrics:
            if m not in by_metric.index:
                cells.append("-")
                continue
            r = by_metric.loc[m]
            pct = m == "speedup"
            fmt = (lambda v: f"{100 * v:.1f}%") if pct else (lambda v: f"{v:.0f}") if m == "steps_to_target" else _f
            if r["n"] < r["n_runs"]:
                cells.append(f"{r['n']}/{r['n_runs']} seeds")
            elif r["ci_low"] != r["ci_low"]:
                cells.append(f"{fmt(r['mean'])} (1 seed)")
            else:
                cells.append(f"{fmt(r['mean'])} [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]")
            if r["n_runs"] < seeds:
                cells[-1] += f" ({int(r['n_runs'])} of {seeds} pairs)"
        lines.append(f"| {g} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


@dataclass
class Comparison:
    """Everything :func:`compare` computes, as tidy tables (see each builder's docstring)."""

    runs: "pd.DataFrame"  # one row per run (run_table)
    stats: "pd.DataFrame"  # group x metric, mean and 95% interval over seeds (group_stats)
    curves: "pd.DataFrame"  # group x metric x step, mean and 95% band over seeds (mean_curves)
    losses: "pd.DataFrame"  # run x logged step (loss_table)
    scores: "pd.DataFrame"  # run x step x layer/head (score_table)
    score_summary: "pd.DataFrame"  # run x stack x step, median/IQR over layers (score_summary)
    markdown: str
    notes: list[str] = field(default_factory=list)  # one line each: torn lines, unfinished runs and pairs, single seeds


def compare(
    run_dirs: Sequence[str | Path], baseline: str | None = None, smooth: int = 1,
    at: Sequence[int] = (), target: float | None = None,
) -> Comparison:
    """Read runs and build every table (nothing is drawn or written)."""
    if not run_dirs:
        raise InputError("give at least one run directory")
    if smooth < 1:
        raise InputError(f"smooth must be at least 1, not {smooth}")
    if any(int(s) <= 0 for s in at):
        raise InputError("steps given with --at must be positive")
    if target is not None and not math.isfinite(target):
        raise InputError(f"the target loss must be a finite number, not {target}")
    runs = [load_run(p) for p in run_dirs]
    if len({r.name for r in runs}) != len(runs):
        raise InputError("run directories must have distinct names")
    seen: dict[tuple, str] = {}
    for r in runs:
        other = seen.setdefault((r.group_key(), json.dumps(r.seed)), r.name)
        if other != r.name:
            raise InputError(f"runs {other} and {r.name} have the same settings and seed; compare one of them")
    notes = [n for r in runs for n in r.notes]
    last_step = {r.name: r.last_step for r in runs}
    losses, scores = loss_table(runs), score_table(runs)
    summ = score_summary(scores)
    table = run_table(runs, losses, baseline, smooth, target, summ)
    for _, row in table[~table["paired"]].iterrows():
        base = row["baseline"]
        notes.append(f"pair {row['run']} / {base} left out of the paired statistics (speed-up, steps to target, "
                     f"differences after step {min(row['steps'], last_step[base])}): {row['run']} ends at step "
                     f"{row['steps']}, {base} at step {last_step[base]}")
    stats = group_stats(table, losses, at)
    curves = mean_curves(table, losses)
    for g, n in table.groupby("group", sort=False)["run"].count().items():
        if n == 1:
            notes.append(f"group {g}: one seed, so no interval can be given")
    md = markdown_table(table) + "\n" + markdown_stats(stats)
    return Comparison(table, stats, curves, losses, scores, summ, md, notes)
