"""Figures of head interventions (:func:`attnscope.interventions.intervene`).

* :func:`sym_vs_symmetry` one panel per named behaviour: the kept fraction of the head's behaviour when only
  the symmetric part of its scores is kept (under sym / clean), against the head's s, one point per head
  coloured by layer (one colour each), its 95% interval over windows as a bar, heads with p_bh < 0.05 drawn
  filled; drawn within :data:`KEPT_RANGE` (a head beyond: a triangle at the edge, counted in the axis label),
  the heads that keep least named beside their own points (:func:`name_points`)
* :func:`loss_heatmap`    layer x head heat map of the change in loss, one panel per intervention (a
  screened estimate marked with a hollow circle, heads not run grey)

Both take the interventions table (``sym_vs_symmetry`` joined with the atlas table on model, layer,
head) and return the Figure (``fig=``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

from .base import cheaper_label, color_scale, figure_for, integer_colorbar, integer_colors, integer_ticks, laid_out

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.axes import Axes
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
#: the kept fractions drawn: a point or an interval's end beyond is drawn at the edge and marked (a triangle)
KEPT_RANGE = (-0.2, 1.5)
#: how many heads are named (the ones that keep least)
LABELLED = 3


def sym_vs_symmetry(joined: "pd.DataFrame", measures: Sequence[str] | None = None, x: str = "symmetry",
                    title: str = "", *, collapse_at: float = 0.5, kept_range: tuple[float, float] = KEPT_RANGE,
                    fig: "Figure | None" = None) -> "Figure":
    """The kept fraction of each head's behaviour under ``sym`` (score under sym / clean score: 1 kept
    whole, 0 lost) against ``x`` (the head's s), one panel per measure: one point per head with a clean
    score of at least :data:`MIN_CLEAN`, coloured by its layer (one colour per layer), its 95% interval as a
    bar, filled where p_bh < 0.05; a dashed line at the collapse threshold ``collapse_at`` (the interventions'
    own, ``attnscope.interventions.summary.KEEP``; plots import no compute room). Points and bars are drawn
    within ``kept_range``: a point beyond it is a triangle at the edge (counted in the y label), a bar beyond
    it ends at the edge. The :data:`LABELLED` heads that keep least are named beside their own points, no
    name over another."""
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
    lo, hi = float(kept_range[0]), float(kept_range[1])
    colours = integer_colors(int(sym["layer"].min()), int(sym["layer"].max()))
    sc = None
    to_name = []
    for ax, measure in zip(axes, measures):
        sub = sym[(sym["measure"] == measure) & (sym["clean"] >= MIN_CLEAN)]
        left = int(((sym["measure"] == measure) & ~(sym["clean"] >= MIN_CLEAN)).sum())
        sc, shown, beyond = _kept_panel(ax, sub, x, lo, hi, colours)
        ax.axhline(1, color="k", lw=0.6)
        ax.axhline(collapse_at, color="#c0392b", lw=0.7, ls="--")
        pad = 0.04 * (hi - lo)
        ax.set_ylim(lo - pad, hi + pad)
        to_name.append((ax, shown.nsmallest(LABELLED, "kept_fraction")))
        ax.set_xlabel(f"{x} of W_qk" + (f"\n({left} heads with clean < {MIN_CLEAN:g} not drawn)" if left else ""),
                      fontsize=8)
        edge = ", ".join(f"{k} {'above' if up else 'below'} {hi if up else lo:g}: {'▲' if up else '▼'}"
                         for up, k in ((True, beyond[1]), (False, beyond[0])) if k)
        ax.set_ylabel(f"kept fraction of {measure} under sym" + (f"\n({edge} at the edge)" if edge else ""),
                      fontsize=8)
        ax.set_title(measure, fontsize=9)
        ax.tick_params(labelsize=7)
    handles = [Line2D([], [], marker="o", ls="", color="#3b528b", markersize=4, label="p_bh < 0.05"),
               Line2D([], [], marker="o", ls="", markerfacecolor="none", color="#888", markersize=4,
                      label="p_bh >= 0.05"),
               Line2D([], [], color="#c0392b", lw=0.7, ls="--", label=f"collapse: kept < {collapse_at:g}")]
    fig.legend(handles=handles, fontsize=6, loc="lower right", frameon=False)  # beside the panels: covers no point
    note = f"not drawn: {', '.join(weak)} (no head scores {MIN_CLEAN:g} or more clean)" if weak else ""
    if sc is not None:
        integer_colorbar(fig, sc, list(axes), "layer", shrink=0.8)
    if title or note:
        fig.suptitle("\n".join(t for t in (title, note) if t), fontsize=9)
    renderer = laid_out(fig)  # names placed on the final layout (they take no part in it)
    for ax, rows in to_name:
        name_points(ax, rows[x].to_numpy(float), rows["drawn"].to_numpy(float),
                    [f"L{r.layer}H{r.head}" for r in rows.itertuples()], renderer)
    return fig


def _kept_panel(ax: "Axes", sub: "pd.DataFrame", x: str, lo: float, hi: float, colours: dict):
    """One panel's points and bars within [lo, hi]: returns the filled points' collection, the rows drawn (with
    ``kept_fraction`` and ``drawn``, its height on the panel) and how many points lie (below, above) the range."""
    import numpy as np

    clean = sub["clean"].to_numpy(float)
    xs, kept = sub[x].to_numpy(float), sub["value"].to_numpy(float) / clean
    # the delta's 95% interval on the kept-fraction scale: (clean + delta) / clean for each bound; a head
    # without one (n < 2) gets no bar; a bar beyond the range ends at its edge
    low, high = 1 + sub["ci_low"].to_numpy(float) / clean, 1 + sub["ci_high"].to_numpy(float) / clean
    ax.vlines(xs, np.clip(low, lo, hi), np.clip(high, lo, hi), colors="#bbb", lw=0.6)
    drawn = np.clip(kept, lo, hi)
    below, above = kept < lo, kept > hi
    inside = ~(below | above)
    sig = (sub["p_bh"] < 0.05).to_numpy()
    layer = sub["layer"].to_numpy(int)
    sc = None
    for where, marker in ((inside, "o"), (above, "^"), (below, "v")):
        s = where & sig
        got = ax.scatter(xs[s], drawn[s], c=layer[s], marker=marker, s=16 if marker == "o" else 22, **colours)
        sc = got if sc is None or marker == "o" else sc
        ax.scatter(xs[where & ~sig], drawn[where & ~sig], marker=marker, facecolors="none", edgecolors="#888",
                   s=14 if marker == "o" else 20, linewidths=0.6)
    shown = sub.assign(kept_fraction=kept, drawn=drawn)
    return sc, shown[np.isfinite(kept) & np.isfinite(xs)], (int(below.sum()), int(above.sum()))


#: where :func:`name_points` tries a name, in points from its point: nearest first, to the right first
_RINGS = (7, 12, 18, 26, 36, 48)
_DIRECTIONS = ((1, 0), (1, 1), (1, -1), (-1, 0), (-1, 1), (-1, -1), (0, 1), (0, -1))


def name_points(ax: "Axes", xs: Sequence[float], ys: Sequence[float], names: Sequence[str], renderer: Any,
                fontsize: float = 6) -> list[Any]:
    """Each name beside its own point (xs[i], ys[i]) in data coordinates: at the nearest place (rings of
    :data:`_RINGS` points, eight directions) where it overlaps no name placed before it, stays inside the
    axes and, if it can, covers no point of the axes; a short leader from the name to the point. The
    annotations take no part in the layout (placed after it: ``renderer`` from :func:`laid_out`)."""
    import numpy as np
    from matplotlib.text import Text

    inside = ax.get_window_extent(renderer)
    dots = np.concatenate([np.asarray(c.get_offsets(), float).reshape(-1, 2) for c in ax.collections
                           if hasattr(c, "get_offsets") and type(c).__name__ == "PathCollection"] or [np.zeros((0, 2))])
    dots = ax.transData.transform(dots) if len(dots) else dots
    placed: list[Any] = []
    out = []
    for px, py, name in zip(xs, ys, names):
        best = None
        for r in _RINGS:
            for dx, dy in _DIRECTIONS:
                text = ax.annotate(name, (px, py), xytext=(r * dx, r * dy * 0.8), textcoords="offset points",
                                   fontsize=fontsize, ha={1: "left", -1: "right", 0: "center"}[dx],
                                   va={1: "bottom", -1: "top", 0: "center"}[dy],
                                   arrowprops=dict(arrowstyle="-", lw=0.4, color="#666", shrinkA=0, shrinkB=2))
                text.set_in_layout(False)
                whole = text.get_window_extent(renderer)  # name and leader (this also places the name)
                box = Text.get_window_extent(text, renderer).expanded(1.06, 1.1)  # the name alone
                fits = (box.x0 >= inside.x0 and box.x1 <= inside.x1 and box.y0 >= inside.y0 and box.y1 <= inside.y1
                        and not any(box.overlaps(b) for b in placed))
                crosses = any(whole.overlaps(b) for b in placed)  # its leader over a name
                covered = int(((dots[:, 0] >= box.x0) & (dots[:, 0] <= box.x1) & (dots[:, 1] >= box.y0)
                               & (dots[:, 1] <= box.y1)).sum())
                cost = (not fits, crosses, covered, r)
                best = cheaper_label(best, cost, text, box)
                if cost[:3] == (False, False, 0):
                    break
            if best is not None and best[0][:3] == (False, False, 0):
                break
        assert best is not None
        placed.append(best[2])
        out.append(best[1])
    return out


def loss_heatmap(table: "pd.DataFrame", title: str = "", *, shape: "tuple[int, int] | None" = None,
                 fig: "Figure | None" = None) -> "Figure":
    """Layer x head heat map of the mean change in loss, one panel per intervention (one shared colour scale):
    the exact change where the head was measured exactly, else its screened estimate (``delta_screen``) with a
    hollow circle on the cell ("est."); heads not run grey. ``shape``: (layers, heads) of the whole model (the
    grid is not cropped to the heads run); default: the largest layer and head in the table. A table of several
    models (a ``model`` column with more than one) gets one row of panels per model, each its own grid."""
    import numpy as np

    loss = table[table["measure"] == "loss"]
    if "delta_screen" in loss.columns:  # exact where measured, else the estimate (marked below)
        estimated = loss["delta"].isna() & loss["delta_screen"].notna()
        loss = loss.assign(delta=loss["delta"].where(~estimated, loss["delta_screen"]), _est=estimated)
    else:
        loss = loss.assign(_est=False)
    kinds = list(dict.fromkeys(loss["intervention"]))  # the table's order (sym, anti, ablate, mean); plots only draw
    models = list(dict.fromkeys(loss["model"])) if "model" in loss.columns and loss["model"].nunique() > 1 else [None]
    n = max(1, len(kinds))
    ncols = min(n, 4) if models == [None] else n
    rows_per_model = math.ceil(n / ncols)
    nrows = rows_per_model * len(models)
    fig = figure_for(fig, figsize=(3.3 * ncols, 3.2 * nrows))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    vals = loss["delta"].to_numpy(float)
    if not kinds or not np.isfinite(vals).any():
        axes[0, 0].text(0.5, 0.5, "no loss (an encoder has no output matrix)", ha="center", va="center",
                        transform=axes[0, 0].transAxes)
        for ax in axes.ravel():
            ax.set_axis_off()
        return fig
    import matplotlib as mpl

    scale = color_scale(vals[np.isfinite(vals)], signed=True)
    scale["cmap"] = mpl.colormaps[scale["cmap"]].with_extremes(bad="#e6e6e6")  # heads not run: grey, not 0
    im = None
    used = []
    for mi, model in enumerate(models):
        part = loss if model is None else loss[loss["model"] == model]
        n_layers, n_heads = int(part["layer"].max()) + 1, int(part["head"].max()) + 1
        if shape is not None and model is None:
            n_layers, n_heads = max(n_layers, int(shape[0])), max(n_heads, int(shape[1]))
        panel = axes[mi * rows_per_model:(mi + 1) * rows_per_model].ravel()
        for ax, kind in zip(panel, kinds):
            grid = np.full((n_layers, n_heads), np.nan)
            sub = part[part["intervention"] == kind]
            grid[sub["layer"].to_numpy(int), sub["head"].to_numpy(int)] = sub["delta"].to_numpy(float)
            im = ax.imshow(grid, aspect="auto", origin="lower", interpolation="nearest", **scale)
            est = sub[sub["_est"].astype(bool)]
            if len(est):
                ax.scatter(est["head"].to_numpy(int), est["layer"].to_numpy(int),
                           s=min(40.0, 900.0 / max(n_layers, n_heads)), facecolors="none", edgecolors="#333",
                           linewidths=0.5)
            ax.set_title(kind if model is None else f"{model}: {kind}", fontsize=8 if model else 9)
            ax.set_xlabel("head", fontsize=8)
            ax.set_ylabel("layer", fontsize=8)
            ax.tick_params(labelsize=7)
            integer_ticks(ax.xaxis, n_heads)
            integer_ticks(ax.yaxis, n_layers)
            used.append(ax)
        for ax in panel[len(kinds):]:
            ax.set_visible(False)
    if im is not None:
        fig.colorbar(im, ax=used, label="delta loss (nats)", shrink=0.8)
    notes = [title] if title else []
    if loss["_est"].astype(bool).any():
        notes.append("o: screened estimate (est.), not measured exactly; grey: not run")
    if notes:
        fig.suptitle("\n".join(notes), fontsize=9)
    return fig
