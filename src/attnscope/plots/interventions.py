"""Figures of head interventions (:func:`attnscope.interventions.intervene`).

* :func:`sym_vs_symmetry` one panel per named behaviour: the kept fraction of the head's behaviour when only
  the symmetric part of its scores is kept (under sym / clean), against the head's s, one point per head
  coloured by layer, its 95% interval over windows as a bar, heads with p_bh < 0.05 drawn filled
* :func:`loss_heatmap`    layer x head heat map of the change in loss, one panel per intervention (a
  screened estimate marked with a hollow circle, heads not run grey)

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


#: heads whose clean score is below this are left out of the kept fraction (a fraction of ~0 means nothing)
MIN_CLEAN = 0.1


def sym_vs_symmetry(joined: "pd.DataFrame", measures: Sequence[str] | None = None, x: str = "symmetry",
                    title: str = "", *, collapse_at: float = 0.5, fig: "Figure | None" = None) -> "Figure":
    """The kept fraction of each head's behaviour under ``sym`` (score under sym / clean score: 1 kept
    whole, 0 lost) against ``x`` (the head's s), one panel per measure: one point per head with a clean
    score of at least :data:`MIN_CLEAN`, coloured by layer, its 95% interval as a bar, filled where
    p_bh < 0.05; a dashed line at the collapse threshold ``collapse_at`` (the interventions' own,
    ``attnscope.interventions.summary.KEEP``; plots import no compute room);
    the three heads that keep least labelled, each label at its own height."""
    import numpy as np

    from matplotlib.lines import Line2D

    sym = joined[joined["intervention"] == "sym"]
    measures = list(measures) if measures is not None else named_measures(sym)
    weak = [m for m in measures if not (sym.loc[sym["measure"] == m, "clean"] >= MIN_CLEAN).any()]
    measures = [m for m in measures if m not in weak]  # no head shows it (an encoder's induction): no panel
    n = max(1, len(measures))
    fig = figure_for(fig, figsize=(3.6 * n + 1.0, 3.3))
    axes = fig.subplots(1, n, squeeze=False).ravel()
    if not measures or x not in sym.columns:
        why = (f"no head scores {MIN_CLEAN:g} or more clean on {', '.join(weak)}" if weak and x in sym.columns
               else "no sym rows to draw")
        axes[0].text(0.5, 0.5, why, ha="center", va="center", transform=axes[0].transAxes, wrap=True)
        axes[0].set_axis_off()
        return fig
    sc = None
    lo_layer, hi_layer = sym["layer"].min(), sym["layer"].max()
    for ax, measure in zip(axes, measures):
        sub = sym[(sym["measure"] == measure) & (sym["clean"] >= MIN_CLEAN)]
        left = int(((sym["measure"] == measure) & ~(sym["clean"] >= MIN_CLEAN)).sum())
        clean = sub["clean"].to_numpy(float)
        xs, kept = sub[x].to_numpy(float), sub["value"].to_numpy(float) / clean
        # the delta's 95% interval on the kept-fraction scale: (clean + delta) / clean for each bound; a head
        # without one (n < 2) gets no bar
        ax.vlines(xs, 1 + sub["ci_low"].to_numpy(float) / clean, 1 + sub["ci_high"].to_numpy(float) / clean,
                  colors="#bbb", lw=0.6)
        sig = (sub["p_bh"] < 0.05).to_numpy()
        sc = ax.scatter(xs[sig], kept[sig], c=sub["layer"][sig], cmap="viridis", s=16, vmin=lo_layer, vmax=hi_layer)
        ax.scatter(xs[~sig], kept[~sig], facecolors="none", edgecolors="#888", s=14, linewidths=0.6)
        ax.axhline(1, color="k", lw=0.6)
        ax.axhline(collapse_at, color="#c0392b", lw=0.7, ls="--")
        lowest = sub.assign(kept_fraction=kept).nsmallest(3, "kept_fraction")
        for i, r in enumerate(lowest.itertuples()):  # each label its own height: none overlaps another
            ax.annotate(f"L{r.layer}H{r.head}", (getattr(r, x), r.kept_fraction), fontsize=6,
                        xytext=(0.97, 0.30 - 0.09 * i), textcoords="axes fraction", ha="right", va="center",
                        arrowprops=dict(arrowstyle="-", lw=0.4, color="#666"))
        ax.set_xlabel(f"{x} of W_qk" + (f"\n({left} heads with clean < {MIN_CLEAN:g} not drawn)" if left else ""),
                      fontsize=8)
        ax.set_ylabel(f"kept fraction of {measure} under sym", fontsize=8)
        ax.set_title(measure, fontsize=9)
        ax.tick_params(labelsize=7)
    handles = [Line2D([], [], marker="o", ls="", color="#3b528b", markersize=4, label="p_bh < 0.05"),
               Line2D([], [], marker="o", ls="", markerfacecolor="none", color="#888", markersize=4,
                      label="p_bh >= 0.05"),
               Line2D([], [], color="#c0392b", lw=0.7, ls="--", label=f"collapse: kept < {collapse_at:g}")]
    fig.legend(handles=handles, fontsize=6, loc="lower right", frameon=False)  # beside the panels: covers no point
    note = f"not drawn: {', '.join(weak)} (no head scores {MIN_CLEAN:g} or more clean)" if weak else ""
    if sc is not None:
        fig.colorbar(sc, ax=list(axes), label="layer", shrink=0.8)
    if title or note:
        fig.suptitle("\n".join(t for t in (title, note) if t), fontsize=9)
    return fig


def loss_heatmap(table: "pd.DataFrame", title: str = "", *, shape: "tuple[int, int] | None" = None,
                 fig: "Figure | None" = None) -> "Figure":
    """Layer x head heat map of the mean change in loss, one panel per intervention (one shared colour scale):
    the exact change where the head was measured exactly, else its screened estimate (``delta_screen``) with a
    hollow circle on the cell ("est."); heads not run grey. ``shape``: (layers, heads) of the whole model (the
    grid is not cropped to the heads run); default: the largest layer and head in the table."""
    import numpy as np

    loss = table[table["measure"] == "loss"]
    if "delta_screen" in loss.columns:  # exact where measured, else the estimate (marked below)
        estimated = loss["delta"].isna() & loss["delta_screen"].notna()
        loss = loss.assign(delta=loss["delta"].where(~estimated, loss["delta_screen"]), _est=estimated)
    else:
        loss = loss.assign(_est=False)
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
    if shape is not None:
        n_layers, n_heads = max(n_layers, int(shape[0])), max(n_heads, int(shape[1]))
    import matplotlib as mpl

    scale = color_scale(vals[np.isfinite(vals)], signed=True)
    scale["cmap"] = mpl.colormaps[scale["cmap"]].with_extremes(bad="#e6e6e6")  # heads not run: grey, not 0
    im = None
    for ax, kind in zip(axes, kinds):
        grid = np.full((n_layers, n_heads), np.nan)
        sub = loss[loss["intervention"] == kind]
        grid[sub["layer"].to_numpy(int), sub["head"].to_numpy(int)] = sub["delta"].to_numpy(float)
        im = ax.imshow(grid, aspect="auto", origin="lower", interpolation="nearest", **scale)
        est = sub[sub["_est"].astype(bool)]
        if len(est):
            ax.scatter(est["head"].to_numpy(int), est["layer"].to_numpy(int), s=min(40.0, 900.0 / max(n_layers, n_heads)),
                       facecolors="none", edgecolors="#333", linewidths=0.5)
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
    notes = [title] if title else []
    if loss["_est"].astype(bool).any():
        notes.append("o: screened estimate (est., first order), not measured exactly; grey: not run")
    if notes:
        fig.suptitle("\n".join(notes), fontsize=9)
    return fig
