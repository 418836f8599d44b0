"""Figures of head anatomy: one function per figure, each taking tidy tables (matplotlib, Agg).

* :func:`metric_heatmaps`   layer x head heatmap of each metric (one figure per model)
* :func:`metric_scatter`    pairs of metrics, one point per head, coloured by layer (colour bar) or model
* :func:`example_maps`      attention maps of a few heads (window 0, top-left corner)
* :func:`silhouette_curve`  mean silhouette per k and method, best k marked from the data
* :func:`cluster_map`       layer x head grid coloured by cluster
* :func:`js_mds`            MDS embedding of head-to-head JS distances (Clark et al. 2019)

Every function takes data and an optional ``ax`` (single panel) or ``fig`` (several panels) and returns
the Figure; the caller saves it with :func:`attnscope.plots.save_figure`. Layer and head axes carry
integer ticks; model names in titles and legends go through :func:`attnscope.plots.model_label`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from .base import (
    SEQUENTIAL_CMAP,
    axes_for,
    color_scale,
    drop_overlapping,
    figure_for,
    integer_ticks,
    laid_out,
    model_label,
)

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

DEFAULT_HEATMAP_METRICS = ("entropy", "sparsity", "distance", "entropy_norm", "confidence", "sink_first", "prev_mass", "lookback")
#: metrics with a sign (drawn with a diverging colormap centred at 0)
SIGNED_METRICS = ("lookback",)
#: colour-bar labels: what a metric's value is, in which unit
METRIC_UNITS = {
    "entropy": "nats", "entropy_norm": "fraction of ln(#keys)", "distance": "positions",
    "lookback": "positions (< 0: looks ahead)", "sparsity": "share of entries < 1e-4",
    "sparsity_visible": "share of visible entries < 1e-4", "period": "keys", "period_enrichment": "x uniform",
}


def metric_label(metric: str) -> str:
    """A metric's colour-bar / axis label with its unit (mass metrics: share of a row's attention)."""
    unit = METRIC_UNITS.get(metric, "share of attention mass")
    return f"{metric} ({unit})"


def layer_head_grid(df: "pd.DataFrame", value: str) -> "np.ndarray":
    """[layers, heads] array of ``value`` from rows (layer, head, value); NaN where a head has no row."""
    import numpy as np

    layer, head = df["layer"].to_numpy(int), df["head"].to_numpy(int)
    g = np.full((int(layer.max()) + 1, int(head.max()) + 1), np.nan)
    g[layer, head] = df[value].to_numpy(float)
    return g


def _grid_axes(ax: "Axes", grid: "np.ndarray") -> None:
    """Labels and integer ticks of a layer x head image."""
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    integer_ticks(ax.xaxis, grid.shape[1])
    integer_ticks(ax.yaxis, grid.shape[0])


def metric_heatmaps(
    df: "pd.DataFrame", metrics: Sequence[str] = DEFAULT_HEATMAP_METRICS, title: str = "", *, fig: "Figure | None" = None
) -> "Figure":
    """Layer x head heatmaps of ``metrics`` (columns of a one-model metrics table), one panel each."""
    metrics = [m for m in metrics if m in df.columns and df[m].notna().any()]
    n = len(metrics)
    cols = min(4, max(n, 1))
    rows = -(-n // cols) if n else 1
    fig = figure_for(fig, figsize=(3.4 * cols, 2.8 * rows + 0.4))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, m in zip(axes.flat, metrics):
        grid = layer_head_grid(df, m)
        scale = color_scale(grid, signed=True if m in SIGNED_METRICS else None)
        im = ax.imshow(grid, aspect="auto", origin="lower", interpolation="nearest", **scale)
        ax.set_title(m, fontsize=9)
        _grid_axes(ax, grid)
        cb = fig.colorbar(im, ax=ax, fraction=0.046)
        cb.set_label(metric_label(m), fontsize=7)
        cb.ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(title or "per-head metrics (mean over windows)")
    return fig


def metric_scatter(
    df: "pd.DataFrame", pairs: Sequence[tuple[str, str]] = (("distance", "entropy"), ("sparsity", "entropy"), ("sink_first", "confidence")),
    hue: str = "model", title: str = "", *, fig: "Figure | None" = None,
) -> "Figure":
    """Scatter plots of metric pairs, one point per head; colour = ``hue`` column.

    A numeric ``hue`` (``layer``) is a sequential colour map with a colour bar (integer ticks), so 30 layers
    stay 30 distinguishable shades in order; a categorical one (``model``) gets one colour per value and a
    legend below the panels, off the data."""
    import numpy as np
    import pandas as pd

    pairs = [(x, y) for x, y in pairs if x in df.columns and y in df.columns]
    fig = figure_for(fig, figsize=(4.2 * max(1, len(pairs)), 3.6))
    axes = fig.subplots(1, max(1, len(pairs)), squeeze=False)
    numeric = hue in df.columns and hue != "model" and pd.api.types.is_numeric_dtype(df[hue])
    groups = list(df.groupby(hue)) if hue in df.columns and not numeric else [("heads", df)]
    sc = None
    for ax, (x, y) in zip(axes.flat, pairs):
        if numeric:
            values = df[hue].to_numpy(float)
            sc = ax.scatter(df[x], df[y], c=values, cmap=SEQUENTIAL_CMAP, vmin=np.nanmin(values),
                            vmax=np.nanmax(values), s=14, alpha=0.8, linewidths=0)
        else:
            for name, sub in groups:
                label = model_label(name) if hue == "model" else f"{hue} {name}"
                ax.scatter(sub[x], sub[y], s=14, alpha=0.75, label=label)
        ax.set_xlabel(x)
        ax.set_ylabel(y)
    if sc is not None:
        cb = fig.colorbar(sc, ax=list(axes.flat), label=hue, shrink=0.9)
        cb.ax.yaxis.get_major_locator().set_params(integer=True)
    elif len(groups) > 1:
        handles, labels = axes.flat[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", fontsize=7, ncols=min(4, len(groups)))
    fig.suptitle(title or "metric pairs, one point per head (mean over windows)", fontsize=10)
    return fig


def example_maps(
    examples: dict[int, Any], heads: Sequence[int] | None = None, title: str = "", *, fig: "Figure | None" = None
) -> "Figure":
    """Attention maps {layer: [h, l, l]} as images (rows = queries), one panel per (layer, head)."""
    import matplotlib
    from matplotlib.colors import Normalize

    layers = sorted(examples)
    n_h = max(a.shape[0] for a in examples.values()) if examples else 1
    size = max(a.shape[-1] for a in examples.values()) if examples else 1
    heads = list(heads) if heads is not None else list(range(n_h))
    fig = figure_for(fig, figsize=(1.7 * len(heads) + 0.8, 1.8 * max(1, len(layers)) + 0.6))
    axes = fig.subplots(len(layers) or 1, len(heads), squeeze=False, sharex=True, sharey=True)
    norm = Normalize(0.0, 1.0)
    ticks = sorted({0, size // 2, size - 1})
    for r, layer in enumerate(layers):
        for c, h in enumerate(heads):
            ax = axes[r, c]
            if h < examples[layer].shape[0]:
                ax.imshow(examples[layer][h] ** 0.5, cmap="magma", norm=norm, interpolation="nearest")
            ax.set_xticks(ticks)
            ax.set_yticks(ticks)
            ax.tick_params(labelsize=6, length=2, pad=1)
            if r == 0:
                ax.set_title(f"head {h}", fontsize=8)
            if c == 0:
                ax.set_ylabel(f"layer {layer}\nquery", fontsize=8)
    sm = matplotlib.cm.ScalarMappable(norm=norm, cmap="magma")
    cb = fig.colorbar(sm, ax=list(axes.flat), fraction=0.02, pad=0.01)
    cb.set_label("sqrt(attention probability)", fontsize=8)
    fig.suptitle(title or "attention maps (sqrt scale, window 0)", fontsize=10)
    fig.supxlabel(f"key position (top-left {size} x {size} of window 0; rows: queries)", fontsize=8)
    return fig


def silhouette_curve(sil: "pd.DataFrame", title: str = "", *, ax: "Axes | None" = None) -> "Figure":
    """Mean silhouette per k for each method; the best k of each method (from the data) is marked."""
    fig, ax = axes_for(ax, figsize=(5, 3.5))
    for method, sub in sil.groupby("method"):
        sub = sub.sort_values("k")
        line = ax.plot(sub["k"], sub["silhouette"], marker="o", label=method)[0]
        best = sub.loc[sub["silhouette"].idxmax()]
        ax.scatter([best["k"]], [best["silhouette"]], s=160, facecolors="none", edgecolors=line.get_color(), linewidths=2)
        ax.annotate(f"best k={int(best['k'])}", (best["k"], best["silhouette"]), textcoords="offset points", xytext=(6, 6), fontsize=8)
    ax.xaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("k")
    ax.set_ylabel("mean silhouette")
    ax.legend()
    ax.set_title(title or "mean silhouette per k (higher: better separated clusters)", fontsize=9)
    return fig


def cluster_map(labels: "pd.DataFrame", title: str = "", *, fig: "Figure | None" = None) -> "Figure":
    """Layer x head grid coloured by cluster (rows of ONE method and k; one panel per model)."""
    import matplotlib
    from matplotlib.colors import ListedColormap

    models = list(labels["model"].unique()) if "model" in labels.columns else [None]
    fig = figure_for(fig, figsize=(4.2 * len(models) + 0.8, 3.6))
    axes = fig.subplots(1, len(models), squeeze=False)
    k = int(labels["cluster"].max()) + 1
    base = matplotlib.colormaps["tab10" if k <= 10 else "tab20"]
    cmap = ListedColormap(base.colors[:k]) if k <= 20 else base.resampled(k)  # k distinct colours
    for ax, m in zip(axes.flat, models):
        grid = layer_head_grid(labels if m is None else labels[labels["model"] == m], "cluster")
        im = ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=k - 0.5, aspect="auto", origin="lower", interpolation="nearest")
        _grid_axes(ax, grid)
        ax.set_title(model_label(m) if m is not None else "", fontsize=9)
    fig.colorbar(im, ax=list(axes.flat), ticks=range(k), label="cluster")
    fig.suptitle(title or "clusters")
    return fig


def js_mds(emb: "pd.DataFrame", *, ax: "Axes | None" = None) -> "Figure":
    """Heads placed by MDS of their Jensen-Shannon distances, coloured by layer."""
    import numpy as np

    fig, ax = axes_for(ax, figsize=(5, 4.2))
    sc = ax.scatter(emb["x"], emb["y"], c=emb["layer"], cmap="viridis", s=28)
    cb = fig.colorbar(sc, ax=ax, label="layer")
    cb.ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_xlabel("MDS 1")
    ax.set_ylabel("MDS 2")
    ax.set_title("heads by attention behaviour (MDS of JS distances)", fontsize=9)
    # name the heads farthest from the centre first (the outliers are the interesting ones), and
    # leave out every name that would overlap one already placed
    xy = emb[["x", "y"]].to_numpy(dtype=float)
    order = np.argsort(-np.hypot(*(xy - np.nanmedian(xy, axis=0)).T), kind="stable")
    texts = [ax.annotate(f"L{emb['layer'].iloc[i]}H{emb['head'].iloc[i]}", tuple(xy[i]), xytext=(3, 3),
                         textcoords="offset points", fontsize=6, alpha=0.8) for i in order]
    drop_overlapping(texts, laid_out(fig))
    return fig
