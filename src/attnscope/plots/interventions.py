"""Figures of head interventions (:func:`attnscope.interventions.intervene`).

* :func:`sym_vs_symmetry` one panel per named behaviour: the change of the head's behaviour when only the
  symmetric part of its scores is kept, against the head's s, one point per head coloured by layer,
  its 95% interval over windows as a bar, heads with p_bh < 0.05 drawn filled
* :func:`loss_heatmap`    layer x head heat map of the change in loss, one panel per intervention (heads
  not run grey)

Both take the interventions table (``sym_vs_symmetry`` joined with the atlas table on model, layer,
head) and return the Figure (``fig=``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

from .base import color_scale, figure_for, integer_ticks

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

NAMED = ("induction", "previous_token", "sink")


def named_measures(table: "pd.DataFrame") -> list[str]:
    """The named behaviours' measures present (random probe first, else text)."""
    present = set(table["measure"])
    out = []
    for name in NAMED:
        for probe in ("random", "text"):
            if f"{name}_{probe}" in present:
                out.append(f"{name}_{probe}")
                break
    return out


def sym_vs_symmetry(joined: "pd.DataFrame", measures: Sequence[str] | None = None, x: str = "symmetry",
                    title: str = "", *, fig: "Figure | None" = None) -> "Figure":
    """Delta behaviour under ``sym`` against ``x`` (the head's s), one panel per measure."""
    import numpy as np

    sym = joined[joined["intervention"] == "sym"]
    measures = list(measures) if measures is not None else named_measures(sym)
    n = max(1, len(measures))
    fig = figure_for(fig, figsize=(3.4 * n, 3.0))
    axes = fig.subplots(1, n, squeeze=False).ravel()
    if not measures or x not in sym.columns:
        axes[0].text(0.5, 0.5, "no sym rows to draw", ha="center", va="center", transform=axes[0].transAxes)
        axes[0].set_axis_off()
        return fig
    sc = None
    for ax, measure in zip(axes, measures):
        sub = sym[sym["measure"] == measure]
        xs, ys = sub[x].to_numpy(float), sub["delta"].to_numpy(float)
        err = np.vstack([ys - sub["ci_low"].to_numpy(float), sub["ci_high"].to_numpy(float) - ys])
        ax.errorbar(xs, ys, yerr=np.where(np.isfinite(err), err, 0), fmt="none", ecolor="#bbb", elinewidth=0.6)
        sig = (sub["p_bh"] < 0.05).to_numpy()
        sc = ax.scatter(xs[sig], ys[sig], c=sub["layer"][sig], cmap="viridis", s=16, vmin=sub["layer"].min(),
                        vmax=sub["layer"].max(), label="p_bh < 0.05")
        ax.scatter(xs[~sig], ys[~sig], facecolors="none", edgecolors="#888", s=14, linewidths=0.6, label="p_bh >= 0.05")
        ax.axhline(0, color="k", lw=0.6)
        for r in sub.nsmallest(3, "delta").itertuples():
            ax.annotate(f"L{r.layer}H{r.head}", (getattr(r, x), r.delta), fontsize=6, xytext=(2, 2),
                        textcoords="offset points")
        ax.set_xlabel(f"{x} of W_qk", fontsize=8)
        ax.set_ylabel(f"delta {measure} under sym", fontsize=8)
        ax.tick_params(labelsize=7)
    axes[0].legend(fontsize=6, loc="best")
    if sc is not None:
        fig.colorbar(sc, ax=list(axes), label="layer", shrink=0.8)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig


def loss_heatmap(table: "pd.DataFrame", title: str = "", *, fig: "Figure | None" = None) -> "Figure":
    """Layer x head heat map of the mean change in loss, one panel per intervention (one shared colour scale)."""
    import numpy as np

    loss = table[table["measure"] == "loss"]
    kinds = list(dict.fromkeys(loss["intervention"]))  # the table's order (sym, anti, ablate, mean); plots only draw
    n = max(1, len(kinds))
    ncols = min(n, 4)
    nrows = math.ceil(n / ncols)
    fig = figure_for(fig, figsize=(3.3 * ncols, 3.2 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
    vals = loss["delta"].to_numpy(float)
    if not kinds or not np.isfinite(vals).any():
        axes[0].text(0.5, 0.5, "no loss (an encoder has no output matrix)", ha="center", va="center",
                     transform=axes[0].transAxes)
        for ax in axes:
            ax.set_axis_off()
        return fig
    n_layers, n_heads = int(loss["layer"].max()) + 1, int(loss["head"].max()) + 1
    import matplotlib as mpl

    scale = color_scale(vals[np.isfinite(vals)], signed=True)
    scale["cmap"] = mpl.colormaps[scale["cmap"]].with_extremes(bad="#e6e6e6")  # heads not run: grey, not 0
    im = None
    for ax, kind in zip(axes, kinds):
        grid = np.full((n_layers, n_heads), np.nan)
        sub = loss[loss["intervention"] == kind]
        grid[sub["layer"].to_numpy(int), sub["head"].to_numpy(int)] = sub["delta"].to_numpy(float)
        im = ax.imshow(grid, aspect="auto", origin="lower", interpolation="nearest", **scale)
        ax.set_title(kind, fontsize=9)
        ax.set_xlabel("head", fontsize=8)
        ax.set_ylabel("layer", fontsize=8)
        ax.tick_params(labelsize=7)
        integer_ticks(ax.xaxis, n_heads)
        integer_ticks(ax.yaxis, n_layers)
    for ax in axes[n:]:
        ax.set_visible(False)
    if im is not None:
        fig.colorbar(im, ax=list(axes[:n]), label="delta loss (nats)", shrink=0.8)
    if title:
        fig.suptitle(title, fontsize=10)
    return fig
