"""Figures of training runs, drawn from the tidy tables of :mod:`attnscope.training.compare`.

One function per figure, each taking the tables and an optional ``fig`` (the band figures also ``ax``, for
curves of one objective: one panel) and returning the matplotlib Figure (not registered with pyplot); the
caller saves it (:func:`attnscope.plots.save_figure`):

* :func:`loss_curves`   training loss (and held-out loss, dashed) vs step, one panel per objective;
* :func:`score_medians` median over layers of s and d vs step with the IQR as a band, one line per run,
                        encoders and decoders in separate rows;
* :func:`score_layers`  s and d of each layer vs step, one curve per layer, one row per run;
* :func:`loss_bands`    mean loss over the seeds of each group with its 95% band (a group with one seed:
                        its run's own curve, no band, "1 seed: no band" in the legend);
* :func:`loss_differences` each group's loss minus its same-seed baseline's, mean over seeds with the
                        95% band (None when no group has a paired baseline).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import figure_for

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

SCORES = (("symmetry", "symmetry s"), ("directionality", "directionality d"))
INIT_STYLE = {"default": "-", "symmetric": "--", "symmetric-paper": ":"}


def _colors(names) -> dict[str, str]:
    palette = ["#1f2a6b", "#c0392b", "#7b2d8e", "#2a8c82", "#d68910", "#566573", "#1e8449", "#a04000"]
    return {n: palette[i % len(palette)] for i, n in enumerate(names)}


def loss_curves(losses: "pd.DataFrame", *, fig: "Figure | None" = None) -> "Figure":
    """losses: run, objective, init, step, loss, eval_loss -> one panel per objective."""
    objectives = list(dict.fromkeys(losses["objective"]))
    fig = figure_for(fig, figsize=(5.5 * len(objectives), 3.8))
    axes = fig.subplots(1, len(objectives), squeeze=False)[0]
    colors = _colors(dict.fromkeys(losses["run"]))
    for ax, obj in zip(axes, objectives):
        part = losses[losses["objective"] == obj]
        for run, df in part.groupby("run", sort=False):
            df = df.sort_values("step")
            train = df[df["step"] > 0]
            ax.plot(train["step"], train["loss"], color=colors[run], label=f"{run} (train)", lw=1.3)
            ev = df.dropna(subset=["eval_loss"])
            if len(ev):
                ax.plot(ev["step"], ev["eval_loss"], color=colors[run], ls="--", marker="o", ms=3, lw=1,
                        label=f"{run} (held-out)")
        ax.set_title(f"{obj} loss")
        ax.set_xlabel("step")
        ax.set_ylabel("cross-entropy (nats)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    return fig


def score_medians(summary: "pd.DataFrame", *, fig: "Figure | None" = None) -> "Figure":
    """summary: run, init, stack, step, {symmetry,directionality}_{median,q1,q3} -> rows = stacks."""
    stacks = [s for s in ("encoder", "decoder", "cross") if s in set(summary["stack"])]
    fig = figure_for(fig, figsize=(10, 3.3 * len(stacks)))
    axes = fig.subplots(len(stacks), 2, squeeze=False)
    colors = _colors(dict.fromkeys(summary["run"]))
    for row, stack in zip(axes, stacks):
        part = summary[summary["stack"] == stack]
        for ax, (metric, label) in zip(row, SCORES):
            for run, df in part.groupby("run", sort=False):
                df = df.sort_values("step")
                style = INIT_STYLE.get(str(df["init"].iloc[0]), "-")
                ax.plot(df["step"], df[f"{metric}_median"], color=colors[run], ls=style, label=run)
                ax.fill_between(df["step"], df[f"{metric}_q1"], df[f"{metric}_q3"], color=colors[run], alpha=0.15)
            ax.axhline(0, color="k", lw=0.5)
            ax.set_ylim(-1.05, 1.05)
            ax.set_title(f"{stack}s: {label} (median, IQR over layers)")
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
    return fig


def score_layers(scores: "pd.DataFrame", *, fig: "Figure | None" = None) -> "Figure":
    """scores: run, step, level, layer, symmetry, directionality -> one row per run, one curve per layer."""
    import matplotlib

    layer = scores[scores["level"] == "layer"]
    runs = list(dict.fromkeys(layer["run"]))
    fig = figure_for(fig, figsize=(10, 2.8 * max(len(runs), 1)))
    axes = fig.subplots(max(len(runs), 1), 2, squeeze=False)
    n_layers = int(layer["layer"].max()) + 1 if len(layer) else 1
    cmap = matplotlib.colormaps["viridis"]
    for row, run in zip(axes, runs):
        part = layer[layer["run"] == run]
        stack = part["stack"].iloc[0]
        for ax, (metric, label) in zip(row, SCORES):
            for li, df in part.groupby("layer"):
                df = df.sort_values("step")
                ax.plot(df["step"], df[metric], color=cmap(li / max(n_layers - 1, 1)), label=f"layer {li}")
            ax.axhline(0, color="k", lw=0.5)
            ax.set_ylim(-1.05, 1.05)
            ax.set_title(f"{run} ({stack}): {label}", fontsize=9)
            ax.set_xlabel("step")
            ax.grid(alpha=0.3)
        row[1].legend(fontsize=6, ncol=2)
    return fig


def _band_axes(objectives: list[str], fig: "Figure | None", ax: "Axes | None", height: float,
               ) -> "tuple[Figure, dict[str, Axes]]":  # fmt: skip
    """objective -> the panel it is drawn on: one per objective on ``fig`` (or a new figure), or ``ax`` when
    there is one objective; ValueError naming the parameter otherwise."""
    if ax is None:
        fig = figure_for(fig, figsize=(5.5 * len(objectives), height))
        return fig, dict(zip(objectives, fig.subplots(1, len(objectives), squeeze=False)[0]))
    if fig is not None:
        raise ValueError("ax= and fig= were both given: pass ax= (one objective) or fig= (a panel per objective)")
    if len(objectives) > 1:
        raise ValueError(f"ax= holds one panel, but the curves have {len(objectives)} objectives "
                         f"({', '.join(objectives)}): pass fig= for a panel each, or one objective's rows")
    owner = ax.get_figure(root=True)
    if owner is None:
        raise ValueError("ax= belongs to no figure: draw on an axes made by fig.subplots() or fig.add_subplot()")
    return owner, {objectives[0]: ax}


def _band_panels(curves: "pd.DataFrame", metrics: tuple[str, str], fig: "Figure | None", ax: "Axes | None",
                 height: float, title: str, ylabel: str, zero_line: bool = False) -> "Figure":
    """Mean over seeds with its 95% t band of the ``metrics`` (training, held-out) rows of ``curves``, a line
    per group (one seed: the run's curve, no band; held-out dashed with markers at its evaluation steps),
    one panel per objective (:func:`_band_axes`)."""
    colors = _colors(list(dict.fromkeys(curves["group"])))
    curves = curves[curves["metric"].isin(metrics)]
    objectives = list(dict.fromkeys(curves["objective"])) or ["loss"]
    fig, axes = _band_axes(objectives, fig, ax, height)
    for (obj, group, metric), df in curves.groupby(["objective", "group", "metric"], sort=False):
        df = df.sort_values("step")
        a = axes[obj]
        held = metric == metrics[1]
        n = int(df["n"].iloc[0])
        seeds = f"{n} seeds" if n > 1 else "1 seed: no band"
        a.plot(df["step"], df["mean"], color=colors[group], ls="--" if held else "-", lw=1.3,
               marker="o" if held or len(df) == 1 else None, ms=3,
               label=f"{group} ({'held-out' if held else 'train'}, {seeds})")
        if n > 1:  # one seed has no interval: its own curve, no (empty) band
            a.fill_between(df["step"], df["ci_low"], df["ci_high"], color=colors[group], alpha=0.15, lw=0)
    for obj, a in axes.items():
        if zero_line:
            a.axhline(0, color="0.3", lw=0.8)
        a.set_title(title.format(objective=obj))
        a.set_xlabel("step")
        a.set_ylabel(ylabel)
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    return fig


def loss_bands(curves: "pd.DataFrame", *, fig: "Figure | None" = None, ax: "Axes | None" = None) -> "Figure":
    """curves: group, objective, metric (loss | eval_loss), step, mean, ci_low, ci_high, n -> the mean loss
    over seeds of each group with its 95% band (training solid, held-out dashed). One panel per objective
    on ``fig``; ``ax`` only for curves of one objective."""
    return _band_panels(curves, ("loss", "eval_loss"), fig, ax, 3.8, "{objective} loss: mean over seeds, 95% t band",
                        "cross-entropy (nats)")


def loss_differences(curves: "pd.DataFrame", *, fig: "Figure | None" = None,
                     ax: "Axes | None" = None) -> "Figure | None":
    """curves (``dloss`` / ``deval_loss`` rows) -> each group's loss minus its same-seed baseline's, mean over
    seeds with the 95% band (training solid, held-out dashed, zero = no difference); below zero the group
    is ahead. One panel per objective on ``fig`` (``ax`` only for curves of one objective); None when no group
    has a paired baseline."""
    if not curves["metric"].isin(["dloss", "deval_loss"]).any():
        return None
    return _band_panels(curves, ("dloss", "deval_loss"), fig, ax, 3.4,
                        "{objective}: loss minus the same-seed baseline's, mean, 95% t band",
                        "difference (nats; < 0 = ahead)",
                        zero_line=True)
