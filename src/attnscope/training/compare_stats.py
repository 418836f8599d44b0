"""Statistics of a comparison for :mod:`.compare`: speed-ups, steps to a target, intervals over seeds.

Owns the two speed-up definitions (:data:`SPEEDUPS`), both computed by :func:`measure_speedup`:

* ``matched`` (the default): run and baseline are read on the **same curve**, the held-out loss where
  both logged it at two or more steps (> 0), else the training loss, both smoothed the same way
  (``smooth``: mean of the last N logged losses). The target is the baseline's final value on that curve
  (or ``target``); each curve's steps to reach it are linearly interpolated between logged steps, and
  the speed-up is ``1 - steps(run) / steps(baseline)``. Identical curves give exactly 0; a curve shifted
  k steps earlier gives ``k / steps(baseline)``; a run that never reaches the target has none.
* ``paper``: the symmetric-initialisation paper's rule, ``1 - step*/total``, step* = the first logged
  step whose (unsmoothed unless ``smooth``) *training* loss is below the baseline's final training loss.
  Biased: a noisy curve dips below its own end value early, so identical curves already score > 0.

Intervals over seeds are Student-t intervals of the mean (:func:`t_interval`); every row says its
estimator, interval kind and n (``estimator``, ``interval``, ``n`` columns). :func:`verdicts` reads the
paired difference of each group: an interval that contains 0 means the inits are not distinguishable.
Nothing here reads files or writes text.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

from attnscope.errors import InputError

from .compare_read import Run, group_labels, pick_baselines

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

SPEEDUPS = ("matched", "paper")  # speed-up definitions (module docstring)
CURVES = ("auto", "held-out", "train")  # which curve the matched speed-up reads
LEVEL = 0.95
T_INTERVAL = "95% t"  # the interval kind of every mean over seeds
MIN_CURVE_POINTS = 2  # points (steps > 0, after smoothing) each curve of a pair needs for a speed-up
HELD_OUT_MIN = MIN_CURVE_POINTS  # held-out points both runs need for the held-out curve to be read


# --------------------------------------------------------------------------- curves and steps to a target


def check_choice(name: str, value: str, choices: Sequence[str]) -> None:
    """InputError naming the parameter (and its CLI option) unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise InputError(f"{name} must be one of {', '.join(choices)}, not {value!r}", params=name)


def curve(losses: "pd.DataFrame", column: str = "loss", smooth: int = 1) -> "pd.DataFrame":
    """Columns step, value: the logged steps (> 0) with a ``column`` value, sorted; the training loss is
    replaced by the mean of the last ``smooth`` logged values (the held-out loss, measured on fixed windows,
    is used as logged)."""
    import pandas as pd

    if smooth < 1:
        raise InputError(f"smooth must be at least 1, not {smooth}", params="smooth")
    df = losses[losses["step"] > 0].dropna(subset=[column]).sort_values("step")
    values = df[column].rolling(smooth, min_periods=smooth).mean() if column == "loss" else df[column]
    return pd.DataFrame({"step": df["step"].to_numpy(), "value": values.to_numpy(dtype=float)}).dropna()


def reach_step(steps: Sequence[float], values: Sequence[float], target: float) -> float | None:
    """The first step at which a curve reaches ``target`` (value <= target), linearly interpolated between
    the logged step before and the first logged step at or below it; the first step if the curve starts
    there; None if it never does."""
    import numpy as np

    s, v = np.asarray(steps, dtype=float), np.asarray(values, dtype=float)
    hits = np.flatnonzero(v <= target)
    if hits.size == 0:
        return None
    i = int(hits[0])
    if i == 0:
        return float(s[0])
    s0, s1, v0, v1 = float(s[i - 1]), float(s[i]), float(v[i - 1]), float(v[i])
    return s0 + (v0 - target) / (v0 - v1) * (s1 - s0)  # v0 > target >= v1


def steps_to(losses: "pd.DataFrame", target: float, smooth: int = 1) -> int | None:
    """The paper's step*: the first logged step (> 0) whose (smoothed) training loss is below ``target``."""
    run = curve(losses, "loss", smooth)
    below = run[run["value"] < target]
    return int(below["step"].iloc[0]) if len(below) else None


def held_out_points(losses: "pd.DataFrame") -> int:
    """How many steps (> 0) have a held-out loss."""
    if "eval_loss" not in losses:
        return 0
    return int(losses.loc[losses["step"] > 0, "eval_loss"].notna().sum())


def curve_column(run: "pd.DataFrame", base: "pd.DataFrame", which: str = "auto",
                 names: tuple[str, str] = ("the run", "its baseline")) -> str:
    """The loss column the matched speed-up reads for a pair: ``eval_loss`` (held-out) when both logged it
    at :data:`HELD_OUT_MIN` or more steps (required for ``which="held-out"``), else ``loss``."""
    check_choice("curve", which, CURVES)
    if which == "train":
        return "loss"
    short = [n for n, df in zip(names, (run, base)) if held_out_points(df) < HELD_OUT_MIN]
    if which == "held-out" and short:
        raise InputError(f"{short[0]} has held-out losses at fewer than {HELD_OUT_MIN} steps; "
                         "compare on the training loss (curve 'train', --curve train)")
    return "loss" if short else "eval_loss"


@dataclass(frozen=True)
class Speedup:
    """One run against its baseline: the curve read, the target, the run's steps to it (None: never), the
    steps it is divided by (the baseline's steps to it; ``paper`` without a target: the run's last step),
    and the speed-up (None where undefined)."""

    method: str
    curve: str  # "held-out" | "train" | "train (smooth N)"
    target: float
    step: float | None
    reference: float | None
    value: float | None
    points: int = 0  # logged points (steps > 0, after smoothing) of the shorter of the two curves read


def measure_speedup(losses: "pd.DataFrame", baseline: "pd.DataFrame", smooth: int = 1, method: str = "matched",
                    which: str = "auto", target: float | None = None,
                    names: tuple[str, str] = ("the run", "its baseline")) -> Speedup:
    """The speed-up of ``losses`` over ``baseline`` (tidy step/loss/eval_loss rows) by ``method``
    (:data:`SPEEDUPS`), on the curve ``which`` (:data:`CURVES`; ``paper`` always reads the training loss)."""
    check_choice("speedup", method, SPEEDUPS)
    column = "loss" if method == "paper" else curve_column(losses, baseline, which, names)
    run, base = curve(losses, column, smooth), curve(baseline, column, smooth)
    label = "held-out" if column == "eval_loss" else "train" if smooth == 1 else f"train (smooth {smooth})"
    goal = target if target is not None else float(base["value"].iloc[-1]) if len(base) else math.nan
    points = min(len(run), len(base))
    if points < MIN_CURVE_POINTS or goal != goal:  # one point: 0 by construction
        return Speedup(method, label, goal, None, None, None, points)
    step: float | None
    if method == "paper":
        step = steps_to(losses, goal, smooth)
        reference = float(run["step"].iloc[-1]) if target is None else steps_to(baseline, goal, smooth)
    else:
        step, reference = reach_step(run["step"], run["value"], goal), reach_step(base["step"], base["value"], goal)
    value = None if step is None or not reference else 1.0 - step / reference
    return Speedup(method, label, goal, step, reference, value, points)


def speedup(losses: "pd.DataFrame", baseline: "pd.DataFrame", smooth: int = 1, method: str = "matched",
            which: str = "auto", target: float | None = None) -> tuple[float | None, float | None]:
    """(steps to the target, speed-up) of ``losses`` over ``baseline``; see :func:`measure_speedup`."""
    s = measure_speedup(losses, baseline, smooth, method, which, target)
    return s.step, s.value


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


# --------------------------------------------------------------------------- per run


def run_table(
    runs: Sequence[Run], losses: "pd.DataFrame", baseline: str | None = None, smooth: int = 1,
    target: float | None = None, summ: "pd.DataFrame | None" = None, method: str = "matched", which: str = "auto",
) -> "pd.DataFrame":
    """One row per run: group, seed, last logged and configured steps, final losses, paired baseline,
    whether the pair is comparable (``paired``: both end at the same step), the speed-up's definition
    (``speedup_method``, ``curve``), ``target``, the run's steps to it (``step_star``, ``reached``), the
    baseline's (``baseline_steps``), ``speedup`` and the points it rests on (``curve_points``: logged steps
    of the shorter of the two curves read), and the final scores (median and IQR over layers). A pair
    that ends at different steps has no speed-up (and no step* for the baseline's target)."""
    import pandas as pd

    base_of = pick_baselines(runs, baseline)
    label = group_labels(runs)
    end = {r.name: r.last_step for r in runs}
    by_run = {name: df for name, df in losses.groupby("run", sort=False)}
    rows = []
    for r in runs:
        b = base_of[r.name]
        mine, base = by_run[r.name], by_run[b]
        paired = end[r.name] == end[b]
        row: dict[str, Any] = {
            "run": r.name, "group": label[r.name], "seed": r.seed, "objective": r.objective, "init": r.init,
            "steps": end[r.name], "total_steps": r.total_steps, "final_loss": _final(mine, "loss"),
            "final_eval_loss": _final(mine, "eval_loss"), "baseline": b, "paired": paired,
            "baseline_final_loss": _final(base, "loss"),
        }
        s = measure_speedup(mine, base, smooth, method, which, target, (f"run {r.name}", f"its baseline {b}"))
        counted = paired and b != r.name  # a speed-up over a comparable baseline other than itself
        row.update(speedup_method=method, curve=s.curve, target=s.target, target_given=target is not None,
                   step_star=s.step if counted or target is not None else None,
                   reached=(s.step is not None) if counted or target is not None else None,
                   baseline_steps=s.reference if counted and method == "matched" else None,
                   speedup=s.value if counted else None, curve_points=s.points if counted else None)
        row.update(_score_cells(summ, r.name))
        rows.append(row)
    return pd.DataFrame(rows)


def _score_cells(summ: "pd.DataFrame | None", run: str) -> dict[str, Any]:
    """The run's final median [Q1, Q3] over layers of s and d, and s, d at its first scored step."""
    s = summ[summ["run"] == run] if summ is not None and not summ.empty else None
    if s is None or s.empty:
        return {}
    s = s.sort_values("step")
    last, first = s.iloc[-1], s.iloc[0]
    cells: dict[str, Any] = {"stack": last["stack"], "scores_over": "layers: median, IQR (Q1, Q3)"}
    for m in ("symmetry", "directionality"):
        cells[f"{m}_start"] = float(first[f"{m}_median"])
        for q in ("median", "q1", "q3"):
            cells[f"{m}_{q}"] = float(last[f"{m}_{q}"])
    return cells


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


def interval_kind(n: int, n_runs: int | None = None) -> str:
    """What a row's interval is: ``95% t``, or why there is none (one seed; seeds without a value)."""
    if n_runs is not None and n < n_runs:
        return f"none ({n} of {n_runs} seeds have a value)"
    return T_INTERVAL if n >= 2 else "none (1 seed)"


def _group_metrics(part: "pd.DataFrame", by_run: dict, at: Sequence[int], final_eval: dict, last: dict,
                   final: dict) -> dict[str, list[float | None]]:
    """A value per run of the group for every metric (NaN: the run has none, counts against the group;
    None: its pair is left out); see :func:`group_stats`."""
    metrics: dict[str, list[float | None]] = {
        "final_loss": list(part["final_loss"]), "final_eval_loss": list(part["final_eval_loss"]),
    }
    for s in at:
        metrics[f"loss@{s}"] = [loss_at(by_run[r], int(s)) for r in part["run"]]
    is_base = bool((part["baseline"] == part["run"]).all())
    paired = list(part["paired"])
    if not (is_base and part["step_star"].isna().all()):
        metrics["steps_to_target"] = _kept(part["step_star"], paired)
    if is_base:
        return metrics
    metrics["speedup"] = _kept(part["speedup"], paired)
    pairs = list(zip(part["run"], part["baseline"]))
    for s in at:
        reached = [ok or int(s) <= min(last[r], last[b]) for ok, (r, b) in zip(paired, pairs)]
        metrics[f"dloss@{s}"] = _kept([loss_at(by_run[r], int(s)) - loss_at(by_run[b], int(s)) for r, b in pairs],
                                      reached)
    metrics["dfinal_loss"] = _kept([final[r] - final[b] for r, b in pairs], paired)
    metrics["dfinal_eval_loss"] = _kept([final_eval[r] - final_eval[b] for r, b in pairs], paired)
    return metrics


def group_stats(table: "pd.DataFrame", losses: "pd.DataFrame", at: Sequence[int] = ()) -> "pd.DataFrame":
    """Tidy: group, objective, init, metric, n_runs, n, estimator, interval, mean, sd, ci_low, ci_high.

    ``estimator`` is ``mean`` (over seeds), ``interval`` the kind (``95% t``: Student t; ``none (1 seed)``;
    ``none (k of n seeds have a value)``). Metrics: ``final_loss``, ``final_eval_loss``, ``loss@S`` for each
    step in ``at``, ``steps_to_target`` and ``speedup`` (the last two for runs that have them), and for runs
    with a paired baseline the paired differences run minus baseline of the same seed: ``dloss@S``,
    ``dfinal_loss`` and ``dfinal_eval_loss`` (negative = the run is ahead; pairing removes the seed's own
    noise, so these intervals are the tight ones). A metric is summarised only when every seed of the group
    has a value (``n == n_runs``); otherwise the mean is NaN (a seed that never reached the target cannot be
    averaged away).

    The paired metrics leave out the pairs that end at different steps (``paired`` False in ``table``; for
    ``dloss@S`` only where S is beyond one of them): ``n_runs`` counts the pairs kept.
    """
    import pandas as pd

    by_run = {name: df for name, df in losses.groupby("run", sort=False)}
    final_eval = dict(zip(table["run"], table["final_eval_loss"]))
    final = dict(zip(table["run"], table["final_loss"]))
    last = dict(zip(table["run"], table["steps"]))
    rows = []
    for g, part in table.groupby("group", sort=False):
        for metric, all_vals in _group_metrics(part, by_run, at, final_eval, last, final).items():
            vals = [v for v in all_vals if v is not None]
            finite = [v for v in vals if v == v]
            if not vals or (not finite and metric in ("final_eval_loss", "dfinal_eval_loss")):
                continue
            complete = len(finite) == len(vals)
            mean, sd, lo, hi = t_interval(finite) if complete else (math.nan,) * 4
            rows.append({"group": g, "objective": part["objective"].iloc[0], "init": part["init"].iloc[0],
                         "metric": metric, "n_runs": len(vals), "n": len(finite), "estimator": "mean",
                         "interval": interval_kind(len(finite), len(vals)), "mean": mean, "sd": sd,
                         "ci_low": lo, "ci_high": hi})
    return pd.DataFrame(rows)


def _kept(values: Sequence[Any], keep: Sequence[bool]) -> list[float | None]:
    """``values`` as floats (None, NaN: no value -> NaN) where ``keep``, else None (left out)."""
    return [(math.nan if v is None else float(v)) if k else None for v, k in zip(values, keep)]


def mean_curves(table: "pd.DataFrame", losses: "pd.DataFrame") -> "pd.DataFrame":
    """Tidy: group, objective, init, metric, step, n, estimator, interval, mean, ci_low, ci_high.

    Metrics: ``loss`` and ``eval_loss`` (mean over the group's seeds), and for groups with a paired
    baseline ``dloss`` and ``deval_loss``, the run minus its same-seed baseline at the same step. Only
    steps (> 0) logged by every run of the group (and its baselines) are kept, so each point averages
    all its seeds. One seed: the run's own curve, ``interval`` ``none (1 seed)`` and NaN bounds.
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
                             "metric": metric, "step": int(step), "n": n_runs, "estimator": "mean",
                             "interval": interval_kind(n_runs), "mean": mean, "ci_low": lo, "ci_high": hi})
    cols = ["group", "objective", "init", "metric", "step", "n", "estimator", "interval", "mean", "ci_low", "ci_high"]
    return pd.DataFrame(rows, columns=cols)


# --------------------------------------------------------------------------- what the intervals say


def verdicts(table: "pd.DataFrame", stats: "pd.DataFrame") -> "pd.DataFrame":
    """Per group with a paired baseline: whether it is distinguishable from its baselines.

    Columns: group, baseline_group, metric (the paired difference read: ``dfinal_eval_loss`` where every
    pair has one, else ``dfinal_loss``), n, mean, ci_low, ci_high, verdict, and the group's speed-up
    (``speedup_n``, ``speedup_mean``, ``speedup_low``, ``speedup_high``). ``verdict``: ``ahead`` /
    ``behind`` (the 95% t-interval of the difference excludes 0, below / above it), ``not distinguishable``
    (it contains 0), ``1 seed`` or ``incomplete`` (no interval to read).
    """
    import pandas as pd

    by = stats.set_index(["group", "metric"]) if len(stats) else None
    group_of = dict(zip(table["run"], table["group"]))
    rows = []
    for g, part in table.groupby("group", sort=False):
        if bool((part["baseline"] == part["run"]).all()) or by is None:
            continue
        metric = next((m for m in ("dfinal_eval_loss", "dfinal_loss") if (g, m) in by.index
                       and by.loc[(g, m), "n"] == by.loc[(g, m), "n_runs"]), None)
        if metric is None:
            metric = "dfinal_loss" if (g, "dfinal_loss") in by.index else None
        if metric is None:  # every pair left out: nothing to read
            continue
        d = by.loc[(g, metric)]
        if d["n"] < d["n_runs"]:
            verdict = "incomplete"
        elif d["n"] < 2:
            verdict = "1 seed"
        elif d["ci_low"] <= 0 <= d["ci_high"]:
            verdict = "not distinguishable"
        else:
            verdict = "ahead" if d["ci_high"] < 0 else "behind"
        sp = by.loc[(g, "speedup")] if (g, "speedup") in by.index else None
        rows.append({"group": g, "baseline_group": ", ".join(dict.fromkeys(group_of[b] for b in part["baseline"])),
                     "metric": metric, "n": int(d["n"]), "n_runs": int(d["n_runs"]), "mean": d["mean"],
                     "ci_low": d["ci_low"], "ci_high": d["ci_high"], "verdict": verdict,
                     "speedup_n": None if sp is None else int(sp["n"]),
                     "speedup_n_runs": None if sp is None else int(sp["n_runs"]),
                     "speedup_mean": None if sp is None else sp["mean"],
                     "speedup_low": None if sp is None else sp["ci_low"],
                     "speedup_high": None if sp is None else sp["ci_high"]})
    return pd.DataFrame(rows)
