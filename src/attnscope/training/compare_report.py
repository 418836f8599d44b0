"""The text report of a comparison for :mod:`.compare`: Markdown tables and the summary lines.

Every number with an interval says what it is, e.g. ``5.528 [5.264, 5.791] (mean, 95% t, n=2)`` for a
mean over seeds, ``0.06 [0.04, 0.11] (median, IQR)`` for a score over layers; one seed reads
``5.528 (1 seed: no interval)``. The summary lines say, per group, whether its paired difference to
the baseline excludes 0; a speed-up is never printed alone. Pure formatting of the tables of
:mod:`.compare_stats`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


def _f(x: Any, nd: int = 3) -> str:
    return "n/a" if x is None or x != x else f"{x:.{nd}f}"


def _pct(x: float) -> str:
    return f"{round(100 * x, 1) + 0.0:.1f}%"  # + 0.0: a tiny negative reads 0.0%, not -0.0%


def _steps(x: float) -> str:
    return f"{x:.0f}"


def interval_text(mean: float, low: float, high: float, n: int, fmt: Callable[[float], str] = _f,
                  estimator: str = "mean") -> str:
    """``mean [low, high] (mean, 95% t, n=N)``; one value: ``mean (1 seed: no interval)``."""
    if n < 2 or low != low:
        return f"{fmt(mean)} (1 seed: no interval)"
    return f"{fmt(mean)} [{fmt(low)}, {fmt(high)}] ({estimator}, 95% t, n={n})"


def _scores(r: "pd.Series", metric: str) -> str:
    if f"{metric}_median" not in r or r[f"{metric}_median"] != r[f"{metric}_median"]:
        return "n/a"
    return f"{_f(r[f'{metric}_median'], 2)} [{_f(r[f'{metric}_q1'], 2)}, {_f(r[f'{metric}_q3'], 2)}] (median, IQR)"


def _speedup_cell(r: "pd.Series") -> str:
    if r["baseline"] == r["run"]:
        return "-"
    if not r["paired"]:
        return "n/a (unpaired)"
    if r["speedup"] is None or r["speedup"] != r["speedup"]:
        if r["step_star"] is None or r["step_star"] != r["step_star"]:
            return f"never reaches {_f(r['target'])}"
        return "n/a (the baseline never reaches the target)"
    points = r.get("curve_points")
    if points is None or points != points:
        return _pct(r["speedup"])
    return f"{_pct(r['speedup'])} ({int(points)} points)"  # what the number rests on: few points, coarse steps


#: how the speed-up cell's "(N points)" reads
POINTS_NOTE = (" (N points): the logged points (steps > 0) of the shorter of the two curves the speed-up reads; "
               "with few, the steps to the target are coarse.")


def speedup_caption(summary: "pd.DataFrame") -> str:
    """One line saying which speed-up the table shows, on which curve."""
    if summary.empty:
        return ""
    method = summary["speedup_method"].iloc[0]
    curves = " / ".join(dict.fromkeys(summary.loc[summary["baseline"] != summary["run"], "curve"])) or "-"
    given = "target_given" in summary and bool(summary["target_given"].any())
    at = f" at the target loss {summary['target'].iloc[0]:g}" if given else ""
    if method == "paper" and given:
        return (f"Speed-up (paper){at}: 1 - step*(run) / step*(baseline), step* = the first logged step whose "
                f"training loss is below the target (curve: {curves}).{POINTS_NOTE}\n")
    if method == "paper":
        return ("Speed-up (paper): 1 - step*/total, step* = the first logged step whose training loss is below the "
                f"baseline's final training loss (curve: {curves}); biased towards noisy curves.{POINTS_NOTE}\n")
    goal = "the target" if given else "the baseline's final loss"
    return (f"Speed-up (matched){at}: 1 - steps for the run to reach {goal} / steps the baseline "
            f"needed, both on the same curve ({curves}), interpolated between logged steps; 0 = no faster.{POINTS_NOTE}\n")


def markdown_table(summary: "pd.DataFrame") -> str:
    """Per run: final loss baseline -> run, speed-up, held-out loss, final median [IQR] scores over layers."""
    lines = [
        "| run | seed | objective | init | steps | final train loss (baseline -> run) | speed-up | held-out loss "
        "| symmetry over layers | directionality over layers |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, r in summary.iterrows():
        if r["baseline"] == r["run"]:
            loss = f"{_f(r['final_loss'])} (baseline)"
        else:
            loss = f"{_f(r['baseline_final_loss'])} -> {_f(r['final_loss'])}"
        total = r["total_steps"]
        steps = r["steps"] if total is None or total != total or r["steps"] == total else f"{r['steps']} of {int(total)}"
        seed = "-" if r["seed"] is None or r["seed"] != r["seed"] else r["seed"]
        lines.append(f"| {r['run']} | {seed} | {r['objective']} | {r['init']} | {steps} | {loss} | {_speedup_cell(r)} "
                     f"| {_f(r['final_eval_loss'])} | {_scores(r, 'symmetry')} | {_scores(r, 'directionality')} |")
    return "\n".join(lines) + "\n\n" + speedup_caption(summary)


def _stat_cell(r: "pd.Series", metric: str) -> str:
    fmt = _pct if metric == "speedup" else _steps if metric == "steps_to_target" else _f
    if r["n"] < r["n_runs"]:
        return f"{r['n']}/{r['n_runs']} seeds"
    return interval_text(r["mean"], r["ci_low"], r["ci_high"], int(r["n"]), fmt)


def markdown_stats(stats: "pd.DataFrame") -> str:
    """Per group: one column per metric, ``mean [low, high] (mean, 95% t, n=N)`` (``mean (1 seed: no
    interval)``; ``k/n seeds`` if incomplete; ``(k of n pairs)`` after a paired metric that left pairs out)."""
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
            cells.append(_stat_cell(r, m))
            if r["n_runs"] < seeds:
                cells[-1] += f" ({int(r['n_runs'])} of {seeds} pairs)"
        lines.append(f"| {g} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


DIFFERENCE = {"dfinal_eval_loss": "final held-out loss", "dfinal_loss": "final training loss"}


def summary_lines(verdicts: "pd.DataFrame") -> list[str]:
    """One line per group with a baseline: the paired difference with its interval, what it says, and the
    speed-up after it (never alone)."""
    lines = []
    for _, v in verdicts.iterrows():
        diff = (f"{DIFFERENCE[v['metric']]} minus the same-seed baseline's "
                + (f"{v['n']}/{v['n_runs']} seeds" if v["n"] < v["n_runs"]
                   else interval_text(v["mean"], v["ci_low"], v["ci_high"], int(v["n"]))))
        sp = ""
        if v["speedup_n"] is not None and v["speedup_n"] == v["speedup_n"]:
            sp = "; speed-up " + (f"{int(v['speedup_n'])}/{int(v['speedup_n_runs'])} seeds reach the target"
                                  if v["speedup_n"] < v["speedup_n_runs"]
                                  else interval_text(v["speedup_mean"], v["speedup_low"], v["speedup_high"],
                                                     int(v["speedup_n"]), _pct))
        head = f"{v['group']} vs {v['baseline_group']}"
        verdict = {
            "not distinguishable": "not distinguishable from the baseline at this budget (the interval contains 0)",
            "ahead": "ahead of the baseline (the interval is below 0)",
            "behind": "behind the baseline (the interval is above 0)",
            "1 seed": "1 seed: no interval, so the inits cannot be told apart",
            "incomplete": "not every pair has a value, so no interval",
        }[v["verdict"]]
        lines.append(f"{head}: {verdict}: {diff}{sp}")
    return lines


def markdown(summary: "pd.DataFrame", stats: "pd.DataFrame", verdicts: "pd.DataFrame") -> str:
    """The whole report: the runs table, the statistics over seeds, the summary lines."""
    text = markdown_table(summary) + "\n" + markdown_stats(stats)
    lines = summary_lines(verdicts)
    if lines:
        text += "\n" + "\n".join(f"* {line}" for line in lines) + "\n"
    return text
