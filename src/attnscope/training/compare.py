"""Comparing training runs over seeds: paired speed-ups, intervals over seeds, loss curves, scores.

:func:`compare` reads run directories and returns a :class:`Comparison` of tidy tables; nothing here
draws or writes (figures: :mod:`attnscope.plots.training`, files: the CLI). Three rooms do the work:

* :mod:`.compare_read`: run directories (``run.json`` + ``metrics.jsonl``, hostile files answered in one
  line) into :class:`Run` objects and per-run tables; **groups** (runs whose configurations agree on
  everything but the seed and the fields that do not change what is trained) and the **paired
  baseline** of each run (the default-init run with the same configuration *and the same seed*);
* :mod:`.compare_stats`: the speed-up (``matched``, the default: steps for the run to reach the
  baseline's final loss over the steps the baseline needed, on the same curve; ``paper``: the
  symmetric-initialisation paper's ``1 - step*/total``, biased), intervals over seeds (mean, 95% t),
  paired differences and what they say (:func:`~.compare_stats.verdicts`);
* :mod:`.compare_report`: the Markdown tables and summary lines, every interval labelled.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from numbers import Integral, Real
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from attnscope.errors import ArgumentTypeError, InputError, check_type

from .compare_read import (
    Run,
    group_labels,
    load_run,
    loss_table,
    pick_baselines,
    score_summary,
    score_table,
)
from .compare_report import markdown
from .compare_stats import (
    CURVES,
    MIN_CURVE_POINTS,
    SPEEDUPS,
    check_choice,
    group_stats,
    loss_at,
    mean_curves,
    measure_speedup,
    reach_step,
    run_table,
    speedup,
    steps_to,
    t_interval,
    verdicts,
)

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "CURVES", "SPEEDUPS", "Comparison", "Run", "compare", "group_labels", "group_stats", "load_run", "loss_at",
    "loss_table", "mean_curves", "measure_speedup", "pick_baselines", "reach_step", "run_table", "score_summary",
    "score_table", "speedup", "steps_to", "t_interval", "verdicts",
]


@dataclass
class Comparison:
    """Everything :func:`compare` computes, as tidy tables (see each builder's docstring)."""

    runs: "pd.DataFrame"  # one row per run (run_table)
    stats: "pd.DataFrame"  # group x metric, mean and 95% t-interval over seeds (group_stats)
    curves: "pd.DataFrame"  # group x metric x step, mean and 95% band over seeds (mean_curves)
    losses: "pd.DataFrame"  # run x logged step (loss_table)
    scores: "pd.DataFrame"  # run x step x layer/head (score_table)
    score_summary: "pd.DataFrame"  # run x stack x step, median/IQR over layers (score_summary)
    verdicts: "pd.DataFrame"  # group with a baseline: its paired difference, what it says (verdicts)
    markdown: str
    notes: list[str] = field(default_factory=list)  # one line each: torn lines, unfinished runs and pairs, single seeds


def _check_options(run_dirs: list, smooth: int, at: Sequence[int], target: float | None, method: str,
                   which: str) -> None:
    check_type(smooth, Integral, "smooth", "a whole number of logged losses")
    for step in at:
        check_type(step, Integral, "at", "a list of whole step numbers")
    if target is not None:
        check_type(target, Real, "target", "a loss (a number)")
    if not run_dirs:
        raise InputError("give at least one run directory")
    if smooth < 1:
        raise InputError(f"smooth must be at least 1, not {smooth}", params="smooth")
    if any(int(s) <= 0 for s in at):
        raise InputError("the steps in at must be positive", params="at")
    if target is not None and not math.isfinite(target):
        raise InputError(f"the target loss must be a finite number, not {target}", params="target")
    if target is not None and target <= 0:
        raise InputError(f"the target loss must be above 0 (a cross-entropy never reaches {target})", params="target")
    check_choice("speedup", method, SPEEDUPS)
    check_choice("curve", which, CURVES)
    if method == "paper" and which != "auto":  # it was silently ignored
        raise InputError(f"curve={which} is for the matched speed-up; speedup=paper always reads the training loss",
                         params=("curve", "speedup"))


def _run_dirs(run_dirs: str | os.PathLike | Iterable) -> list:
    """One path alone or any iterable of them, a seed grid's bookkeeping folder (``.grid``) left out; a
    grid's own folder (``attnscope train --seeds ... --out DIR``) stands for its runs, as ``DIR/*`` would."""
    from .runlog import GRID_STORE

    if isinstance(run_dirs, (str, os.PathLike)):
        run_dirs = [run_dirs]
    check_type(run_dirs, Iterable, "run_dirs", "a run directory or a list of them")
    out: list = []
    for p in run_dirs:
        if Path(p).name == GRID_STORE:
            continue
        if (Path(p) / GRID_STORE).is_dir() and not (Path(p) / "run.json").exists():
            out += sorted(str(r) for r in Path(p).iterdir() if r.is_dir() and r.name != GRID_STORE)
        else:
            out.append(p)
    return out


def _confounded(runs: list[Run], table: "pd.DataFrame") -> list[str]:
    """A note per run whose baseline (named with ``baseline=``) differs from it in more than the init."""
    from .compare_read import setting_differences

    by_name = {r.name: r for r in runs}
    out = []
    for run, base in zip(table["run"], table["baseline"]):
        diff = setting_differences(by_name[run], by_name[base]) if base and base != run else []
        if diff:
            out.append(f"run {run} differs from its baseline {base} in {', '.join(diff)}, so its paired differences "
                       "are not those of the init (or tied W_q, W_k) alone")
    return out


def _idle_options(runs: list[Run], losses: "pd.DataFrame", table: "pd.DataFrame", smooth: int,
                  at: Sequence[int]) -> list[str]:
    """A note for each option given that could not act: ``at`` steps past every run's end, a ``smooth``
    window wider than a run's logged losses, or ``smooth`` where no pair read the training loss."""
    notes = []
    last = {r.name: r.last_step for r in runs}
    for step in sorted({int(s) for s in at}):
        past = [name for name, end in last.items() if end < step]
        if len(past) == len(last):
            notes.append(f"at step {step} is past the last logged step of every run ({max(last.values())}): "
                         f"loss@{step} has no value")
        elif past:
            notes.append(f"at step {step} is past the last logged step of {', '.join(past)}: their loss@{step} is "
                         "missing, so its summary covers fewer seeds")
    if smooth > 1 and not table["curve"].str.startswith("train").any():
        notes.append(f"smooth {smooth} had no effect: every speed-up read the held-out loss, which is not "
                     "smoothed (curve train smooths the training loss)")
    elif smooth > 1:
        logged = losses[losses["step"] > 0].dropna(subset=["loss"]).groupby("run")["step"].count()
        short = [f"{name} ({int(n)})" for name, n in logged.items() if n - smooth + 1 < MIN_CURVE_POINTS]
        if short:
            notes.append(f"smooth {smooth} leaves fewer than {MIN_CURVE_POINTS} points of the training-loss curve "
                         f"of {', '.join(short)} (losses logged after step 0): no speed-up is read from them")
    return notes


def _target_notes(table: "pd.DataFrame", losses: "pd.DataFrame", target: float | None) -> list[str]:
    """A note when a given target says nothing: above every run's first logged loss on the curve the
    speed-ups read (all reach it at once: every speed-up 0 by construction) or below every logged loss
    (none reaches it)."""
    if target is None:
        return []
    column, what = ("eval_loss", "held-out") if table["curve"].eq("held-out").all() else ("loss", "training")
    logged = losses[losses["step"] > 0].dropna(subset=[column]).sort_values("step")
    if logged.empty:
        return []
    first = logged.groupby("run")[column].first()
    if (first <= target).all():
        return [f"the target {target:g} is at or above every run's first logged {what} loss (highest "
                f"{first.max():.4g}): each reaches it at once, so every speed-up is 0 by construction"]
    if not table["reached"].fillna(False).astype(bool).any():
        return [f"no run reaches the target {target:g} (lowest logged {what} loss {logged[column].min():.4g})"]
    return []


def _read(run_dirs: Sequence[str | Path]) -> list[Run]:
    runs = [load_run(p) for p in run_dirs]
    if len({r.name for r in runs}) != len(runs):
        raise InputError("run directories must have distinct names")
    seen: dict[tuple, str] = {}
    for r in runs:
        other = seen.setdefault((r.group_key(), json.dumps(r.seed)), r.name)
        if other != r.name:
            raise InputError(f"runs {other} and {r.name} have the same settings and seed; compare one of them")
    return runs


def compare(
    run_dirs: str | Path | Iterable[str | Path], baseline: str | None = None, smooth: int = 1,
    at: Sequence[int] = (), target: float | None = None, speedup: str = "matched", curve: str = "auto",
) -> Comparison:
    """Read runs and build every table (nothing is drawn or written).

    ``speedup``: ``matched`` (default) or ``paper`` (:data:`SPEEDUPS`); ``curve``: what ``matched`` reads,
    ``auto`` (held-out where both runs of a pair logged it, else training), ``held-out`` or ``train``;
    ``smooth``: mean of the last N logged training losses, applied to both curves alike.
    ``run_dirs``: run directories (one path alone is fine); a seed grid's folder stands for its runs and
    its bookkeeping folder (``.grid``, e.g. from ``sorted(Path("runs/grid").iterdir())``) is skipped.
    """
    run_dirs = _run_dirs(run_dirs)
    at = (at,) if isinstance(at, Integral) and not isinstance(at, bool) else at  # one step alone is fine
    if isinstance(at, (str, bytes)) or not isinstance(at, Iterable):
        raise ArgumentTypeError(f"at must be a list of whole step numbers, not {type(at).__name__} {at!r:.40}",
                                params="at")
    at = tuple(at)
    _check_options(run_dirs, smooth, at, target, speedup, curve)
    runs = _read(run_dirs)
    notes = [n for r in runs for n in r.notes]
    last_step = {r.name: r.last_step for r in runs}
    losses, scores = loss_table(runs), score_table(runs)
    summ = score_summary(scores)
    table = run_table(runs, losses, baseline, smooth, target, summ, speedup, curve)
    for _, row in table[~table["paired"]].iterrows():
        base = row["baseline"]
        notes.append(f"pair {row['run']} / {base} left out of the paired statistics (speed-up, steps to target, "
                     f"differences after step {min(row['steps'], last_step[base])}): {row['run']} ends at step "
                     f"{row['steps']}, {base} at step {last_step[base]}")
    notes += _confounded(runs, table)
    notes += _idle_options(runs, losses, table, smooth, at)
    notes += _target_notes(table, losses, target)
    stats = group_stats(table, losses, at)
    curves = mean_curves(table, losses)
    for g, n in table.groupby("group", sort=False)["run"].count().items():
        if n == 1:
            notes.append(f"group {g}: one seed, so no interval can be given")
    said = verdicts(table, stats)
    return Comparison(table, stats, curves, losses, scores, summ, said, markdown(table, stats, said), notes)
