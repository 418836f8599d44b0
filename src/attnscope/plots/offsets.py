"""Figures of position-aware geometry, drawn from the tables of ``geometry.score(offsets=...)`` and
``geometry.frequencies``:

* :func:`plot_offset_curves`   s(offset) and d(offset) of every layer's form (log-symmetric offset axis);
* :func:`plot_offset_heatmaps` layers x offsets heatmaps of s and d;
* :func:`plot_frequency_usage` heads x rotary pairs heatmap of one layer's energy shares, pairs placed
  by wavelength (log axis), the trained context length marked when known.

:func:`offset_figures` and :func:`frequency_figures` yield ``(file name, Figure)`` pairs for every model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from .base import axes_for, figure_for, integer_ticks, model_label
from .geometry import SCORES, slug

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def _layer_rows(df: "pd.DataFrame") -> "pd.DataFrame":
    rows = df[df["level"] == "layer"]
    if rows.empty:  # head rows only: the median over heads stands in for the layer
        rows = df.groupby(["stack", "layer", "offset"], as_index=False)[["symmetry", "directionality"]].median()
    return rows


def _symlog(ax: "Axes") -> None:
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("offset = query position - key position (tokens, symlog)")


def plot_offset_curves(df: "pd.DataFrame", title: str | None = None, *, fig: "Figure | None" = None) -> "Figure":
    """s(offset) and d(offset), one line per layer (colour = depth); one model's records with ``offset``."""
    import matplotlib

    rows = _layer_rows(df)
    fig = figure_for(fig, figsize=(11, 4))
    axes = fig.subplots(1, 2)
    cmap = matplotlib.colormaps["viridis"]
    n = max(int(rows["layer"].max()) + 1, 1) if not rows.empty else 1
    for ax, (col, name) in zip(axes, SCORES):
        for (stack, layer), grp in rows.groupby(["stack", "layer"], sort=True):
            grp = grp.sort_values("offset")
            ax.plot(grp["offset"], grp[col], color=cmap(layer / max(n - 1, 1)), lw=1.0, alpha=0.85)
        ax.axhline(0, color="0.6", lw=0.6)
        ax.set_ylim(-1.05, 1.05)
        ax.set_ylabel(name)
        _symlog(ax)
        if not rows.empty and rows["offset"].nunique() > 1:
            ax.set_xlim(float(rows["offset"].min()), float(rows["offset"].max()))
    sm = matplotlib.cm.ScalarMappable(cmap=cmap, norm=matplotlib.colors.Normalize(0, n - 1))
    fig.colorbar(sm, ax=axes, shrink=0.9, label="layer")
    if title or not rows.empty:
        fig.suptitle(title or f"{model_label(str(df['model'].iloc[0]))}: the form at each offset", fontsize=11)
    return fig


def plot_offset_heatmaps(df: "pd.DataFrame", title: str | None = None, *, fig: "Figure | None" = None) -> "Figure":
    """Layers x offsets heatmaps of s and d (diverging, -1..1); offsets in sorted order, labelled."""
    import numpy as np

    rows = _layer_rows(df)
    offsets = sorted(rows["offset"].unique().tolist())
    n_layers = max(int(rows["layer"].max()) + 1, 1) if not rows.empty else 1
    fig = figure_for(fig, figsize=(min(max(6.0, 1.5 + 0.35 * len(offsets)) * 2, 16.0), min(2 + 0.22 * n_layers, 9)))
    axes = fig.subplots(1, 2)
    col_of = {o: i for i, o in enumerate(offsets)}
    for ax, (col, name) in zip(axes, SCORES):
        grid = np.full((n_layers, len(offsets)), np.nan)
        grid[rows["layer"].to_numpy(int), [col_of[o] for o in rows["offset"]]] = rows[col].to_numpy(float)
        im = ax.imshow(grid, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", origin="lower", interpolation="nearest")
        step = max(1, len(offsets) // 12)
        ax.set_xticks(range(0, len(offsets), step), [str(o) for o in offsets[::step]], rotation=60, fontsize=7)
        integer_ticks(ax.yaxis, n_layers)
        ax.set_xlabel("offset (tokens)")
        ax.set_ylabel("layer")
        ax.set_title(name, fontsize=10)
        fig.colorbar(im, ax=ax, shrink=0.9)
    if title or not rows.empty:
        fig.suptitle(title or model_label(str(df["model"].iloc[0])), fontsize=11)
    return fig


def plot_frequency_usage(df: "pd.DataFrame", layer: int, context: int | None = None, title: str | None = None, *,
                         ax: "Axes | None" = None) -> "Figure":  # fmt: skip
    """Heads x rotary pairs heatmap of one layer's energy shares, x = wavelength (log); ``context`` marked."""
    import numpy as np

    rot = df[(df["layer"] == layer) & (df["pair"] >= 0)]
    grid = rot.pivot_table(index="head", columns="pair", values="energy_share").sort_index(axis=1)
    wl = rot.groupby("pair")["wavelength"].first().reindex(grid.columns).to_numpy(float)
    fig, ax = axes_for(ax, figsize=(8, 1.5 + 0.25 * max(len(grid), 1)))
    edges = np.sqrt(wl[:-1] * wl[1:]) if wl.size > 1 else np.array([])
    lo = wl[0] ** 2 / edges[0] if edges.size else wl[0] / 2
    hi = wl[-1] ** 2 / edges[-1] if edges.size else wl[0] * 2
    x = np.concatenate([[lo], edges, [hi]])
    y = np.arange(len(grid) + 1) - 0.5
    mesh = ax.pcolormesh(x, y, grid.to_numpy(float), cmap="magma", shading="flat")
    ax.set_xscale("log")
    ax.set_xlabel("wavelength 2 pi / theta (tokens, log)")
    ax.set_ylabel("head")
    integer_ticks(ax.yaxis, len(grid))
    if context:
        ax.axvline(context, color="cyan", lw=1.2, ls="--", label=f"trained context {context}")
        ax.legend(loc="upper left", fontsize=7)
    fig.colorbar(mesh, ax=ax, shrink=0.9, label="share of the head's W_qk energy")
    ax.set_title(title or f"{model_label(str(df['model'].iloc[0]))} · layer {layer}: energy by rotary pair", fontsize=10)
    return fig


def offset_figures(df: "pd.DataFrame") -> Iterator[tuple[str, "Figure"]]:
    """``<model>_offsets.png`` (curves) and ``<model>_offsets_heatmap.png`` for every model of a table with ``offset``."""
    for model, grp in df.groupby("model", sort=False):
        yield f"{slug(model)}_offsets.png", plot_offset_curves(grp)
        yield f"{slug(model)}_offsets_heatmap.png", plot_offset_heatmaps(grp)


def frequency_figures(df: "pd.DataFrame") -> Iterator[tuple[str, "Figure"]]:
    """``<model>_frequencies_L<layer>.png`` for the first, middle and last layer of every model (the
    table's ``context_length`` column, when known, is marked)."""
    for model, grp in df.groupby("model", sort=False):
        ctx = grp["context_length"].dropna() if "context_length" in grp.columns else []
        context = int(ctx.iloc[0]) if len(ctx) else None
        layers = sorted(grp["layer"].unique().tolist())
        for layer in dict.fromkeys([layers[0], layers[len(layers) // 2], layers[-1]]):
            yield f"{slug(model)}_frequencies_L{layer}.png", plot_frequency_usage(grp, layer, context)
