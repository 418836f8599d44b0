"""Figures of the atlas: geometry of each head's W_qk against what the head does.

* :func:`geometry_vs_behaviour`  one panel per behaviour metric: a geometry score (s or d) on x, the
  metric on y, one point per head coloured by layer (or by model for a pooled table), the strongest
  heads of each metric labelled ``L<layer>H<head>``, Spearman's rho, its interval and q in the title
* :func:`correlation_forest`     rho with its 95% interval per (geometry score, metric): a dot and a bar,
  the zero line drawn; red where the verdict (read from the Benjamini-Hochberg q) is a relation

Both take the tidy tables of :func:`attnscope.atlas.atlas` and return the Figure (``fig=`` / ``ax=``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

from .base import axes_for, figure_for, model_label

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

GEOMETRY_LABEL = {"symmetry": "symmetry s of W_qk", "directionality": "directionality d of W_qk",
                  "symmetry_at_1": "s of the form at offset 1", "directionality_at_1": "d of the form at offset 1",
                  "symmetry_over_offsets": "s, mean over offsets", "directionality_over_offsets": "d, mean over offsets"}


def geometry_short(x: str) -> str:
    """A geometry column as a short label: ``s``, ``d``, ``s (offset 1)``, ``d (over offsets)``."""
    base = "s" if x.startswith("symmetry") else "d" if x.startswith("directionality") else x
    if x.endswith("_at_1"):
        return f"{base} (offset 1)"
    if x.endswith("_over_offsets"):
        return f"{base} (over offsets)"
    return base


def _colour_by(table: "pd.DataFrame", hue: str):  # noqa: ANN202
    """(values for scatter's c=, colormap, legend handles or None) for a numeric or categorical hue."""
    import matplotlib as mpl

    if hue == "model":
        names = list(dict.fromkeys(table["model"]))
        cmap = mpl.colormaps["tab10"]
        colours = {n: cmap(i % 10) for i, n in enumerate(names)}
        return [colours[n] for n in table["model"]], None, colours
    return table[hue].to_numpy(float), "viridis", None


def geometry_vs_behaviour(
    table: "pd.DataFrame",
    x: str,
    metrics: Sequence[str],
    correlations: "pd.DataFrame | None" = None,
    hue: str = "layer",
    label_top: int = 3,
    ncols: int = 4,
    title: str = "",
    *,
    fig: "Figure | None" = None,
) -> "Figure":
    """One panel per metric of ``metrics``: ``x`` (a geometry column) against the metric, one point per head."""
    import numpy as np

    n = len(metrics)
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    fig = figure_for(fig, figsize=(3.3 * ncols, 2.9 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    c, cmap, legend = _colour_by(table, hue)
    sc = None
    for ax, metric in zip(axes, metrics):
        sc = ax.scatter(table[x], table[metric], c=c, cmap=cmap, s=14, alpha=0.8, linewidths=0)
        top = table[np.isfinite(table[metric].to_numpy(float))].nlargest(label_top, metric)
        for r in top.itertuples():
            ax.annotate(f"L{r.layer}H{r.head}", (getattr(r, x), getattr(r, metric)), fontsize=6,
                        xytext=(2, 2), textcoords="offset points")
        ax.set_xlabel(GEOMETRY_LABEL.get(x, x), fontsize=8)
        ax.set_ylabel(metric, fontsize=8)
        ax.set_title(_rho_title(correlations, x, metric), fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in axes[n:]:
        ax.set_visible(False)
    if legend is not None:
        from matplotlib.lines import Line2D

        handles = [Line2D([], [], marker="o", ls="", color=col, label=model_label(m)) for m, col in legend.items()]
        fig.legend(handles=handles, loc="outside lower center", ncols=min(4, len(handles)), fontsize=7)
    elif sc is not None:
        fig.colorbar(sc, ax=list(axes[:n]), label=hue, shrink=0.8)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def _rho_title(correlations: "pd.DataFrame | None", x: str, y: str) -> str:
    if correlations is None:
        return ""
    row = correlations[(correlations["x"] == x) & (correlations["y"] == y)]
    if row.empty:
        return ""
    r = row.iloc[0]
    if r.rho != r.rho:  # constant column or too few heads: no rho, no interval
        return f"rho undefined (-), n = {r.n}"
    ci = f" [{r.ci_low:.2f}, {r.ci_high:.2f}]" if r.ci_low == r.ci_low else ""
    few = f" in {r.n_units} {r.unit}s (few)" if bool(getattr(r, "few_units", False)) else ""
    text = f"rho = {r.rho:.2f}{ci}, n = {r.n}{few}"
    if "q_run" in row.columns and r.q_run == r.q_run:
        text += f", q = {r.q_run:.2g}"
    return text


def correlation_forest(correlations: "pd.DataFrame", title: str = "", *, ax: "Axes | None" = None) -> "Figure":
    """rho and its 95% interval for every (geometry score, metric) row; the zero line marks "no relation"."""
    import numpy as np

    fig, ax = axes_for(ax, figsize=(6.0, 0.28 * len(correlations) + 1.2))
    pooled = "model" in correlations.columns and correlations["model"].nunique() > 1
    labels = [(f"{model_label(str(r.model))}: " if pooled else "") + f"{geometry_short(r.x)} vs {r.y}"
              + (" (rho undefined)" if r.rho != r.rho else f" (few {r.unit}s)" if bool(getattr(r, "few_units", False))
                 else "")
              for r in correlations.itertuples()]
    ypos = np.arange(len(correlations))[::-1]
    xs = correlations["x"].tolist()
    for i in range(1, len(xs)):  # a thin line between the geometry scores
        if xs[i] != xs[i - 1]:
            ax.axhline(ypos[i] + 0.5, color="0.85", lw=0.8)
    rho = correlations["rho"].to_numpy(float)
    colours = ["tab:gray" if r.relation.startswith("no relation") else "tab:red" for r in correlations.itertuples()]
    # the bar spans [ci_low, ci_high] as computed: a percentile bootstrap interval can miss its own rho (ties)
    ax.hlines(ypos, correlations["ci_low"].to_numpy(float), correlations["ci_high"].to_numpy(float),
              colors=colours, lw=1.5)
    ax.scatter(rho, ypos, c=colours, s=16, zorder=3)
    ax.axvline(0, color="k", lw=0.8)
    ax.set_yticks(ypos, labels, fontsize=7)
    ax.set_xlim(-1.05, 1.05)
    interval = str(correlations["interval"].iloc[0]) if len(correlations) else ""
    judged = ("red: a relation by the verdict, read from the Benjamini-Hochberg q of a permutation test of whole layers"
              if "q_run" in correlations else "red: a relation by the verdict")
    ax.set_xlabel(f"Spearman rho across heads ({interval})\n{judged}", fontsize=7)
    if title:
        ax.set_title(title, fontsize=9)
    return fig
