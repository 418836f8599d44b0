"""Figures of head anatomy: one function per figure, each taking tidy tables (matplotlib, Agg).

* :func:`metric_heatmaps`   layer x head heatmap of each metric (one figure per model)
* :func:`metric_scatter`    pairs of metrics, one point per head, coloured by layer
* :func:`example_maps`      attention maps of a few heads (window 0, top-left corner)
* :func:`silhouette_curve`  mean silhouette per k and method, best k marked from the data
* :func:`cluster_map`       layer x head grid coloured by cluster
* :func:`js_mds`            MDS embedding of head-to-head JS distances (Clark et al. 2019)

Every function returns the Figure and, when ``path`` is given, writes it (atomically) and closes it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from . import pyplot, save_figure

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

DEFAULT_HEATMAP_METRICS = ("entropy", "sparsity", "distance", "entropy_norm", "confidence", "sink_first", "prev_mass", "lookback")


def _save(fig: "Figure", path: str | Path | None) -> "Figure":
    """Save when a path is given (atomically, via attnscope.plots.save_figure); return the figure."""
    if path is not None:
        save_figure(fig, path, dpi=120)
    return fig


def _grid(df: "pd.DataFrame", value: str) -> Any:
    import numpy as np

    L, H = int(df["layer"].max()) + 1, int(df["head"].max()) + 1
    g = np.full((L, H), np.nan)
    for l, h, v in df[["layer", "head", value]].itertuples(index=False):
        g[int(l), int(h)] = v
    return g


def metric_heatmaps(df: "pd.DataFrame", metrics: Sequence[str] = DEFAULT_HEATMAP_METRICS, title: str = "", path=None) -> "Figure":
    """Layer x head heatmaps of ``metrics`` (columns of a one-model metrics table)."""
    plt = pyplot()
    metrics = [m for m in metrics if m in df.columns and df[m].notna().any()]
    n = len(metrics)
    cols = min(4, max(n, 1))
    rows = -(-n // cols) if n else 1
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.8 * rows), squeeze=False)
    for ax, m in zip(axes.flat, metrics):
        im = ax.imshow(_grid(df, m), aspect="auto", cmap="viridis", origin="lower")
        ax.set_title(m, fontsize=9)
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        fig.colorbar(im, ax=ax, fraction=0.046)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.suptitle(title or "per-head metrics (mean over windows)")
    fig.tight_layout()
    return _save(fig, path)


def metric_scatter(
    df: "pd.DataFrame", pairs: Sequence[tuple[str, str]] = (("distance", "entropy"), ("sparsity", "entropy"), ("sink_first", "confidence")),
    hue: str = "model", path=None,
) -> "Figure":
    """Scatter plots of metric pairs, one point per head; colour = ``hue`` column (model or layer)."""
    plt = pyplot()
    pairs = [(x, y) for x, y in pairs if x in df.columns and y in df.columns]
    fig, axes = plt.subplots(1, max(1, len(pairs)), figsize=(4.2 * max(1, len(pairs)), 3.6), squeeze=False)
    groups = list(df.groupby(hue)) if hue in df.columns else [("heads", df)]
    for ax, (x, y) in zip(axes.flat, pairs):
        for name, sub in groups:
            ax.scatter(sub[x], sub[y], s=14, alpha=0.75, label=str(name)[-30:])
        ax.set_xlabel(x)
        ax.set_ylabel(y)
    if len(groups) > 1:
        axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    return _save(fig, path)


def example_maps(examples: dict[int, Any], heads: Sequence[int] | None = None, title: str = "", path=None) -> "Figure":
    """Attention maps {layer: [h, l, l]} as images (rows = queries), one panel per (layer, head)."""
    plt = pyplot()
    layers = sorted(examples)
    n_h = max(a.shape[0] for a in examples.values()) if examples else 1
    heads = list(heads) if heads is not None else list(range(n_h))
    fig, axes = plt.subplots(len(layers) or 1, len(heads), figsize=(1.7 * len(heads), 1.8 * max(1, len(layers))), squeeze=False)
    for r, layer in enumerate(layers):
        for c, h in enumerate(heads):
            ax = axes[r, c]
            if h < examples[layer].shape[0]:
                ax.imshow(examples[layer][h] ** 0.5, cmap="magma", interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(f"head {h}", fontsize=8)
            if c == 0:
                ax.set_ylabel(f"layer {layer}", fontsize=8)
    fig.suptitle(title or "attention maps (sqrt scale, window 0)", fontsize=10)
    fig.tight_layout()
    return _save(fig, path)


def silhouette_curve(sil: "pd.DataFrame", path=None) -> "Figure":
    """Mean silhouette per k for each method; the best k of each method (from the data) is marked."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for method, sub in sil.groupby("method"):
        sub = sub.sort_values("k")
        line = ax.plot(sub["k"], sub["silhouette"], marker="o", label=method)[0]
        best = sub.loc[sub["silhouette"].idxmax()]
        ax.scatter([best["k"]], [best["silhouette"]], s=160, facecolors="none", edgecolors=line.get_color(), linewidths=2)
        ax.annotate(f"best k={int(best['k'])}", (best["k"], best["silhouette"]), textcoords="offset points", xytext=(6, 6), fontsize=8)
    ax.set_xlabel("k")
    ax.set_ylabel("mean silhouette")
    ax.legend()
    fig.tight_layout()
    return _save(fig, path)


def cluster_map(labels: "pd.DataFrame", title: str = "", path=None) -> "Figure":
    """Layer x head grid coloured by cluster (rows of ONE method and k; one panel per model)."""
    plt = pyplot()
    models = list(labels["model"].unique()) if "model" in labels.columns else [None]
    fig, axes = plt.subplots(1, len(models), figsize=(4.2 * len(models), 3.6), squeeze=False)
    k = int(labels["cluster"].max()) + 1
    cmap = plt.get_cmap("tab10" if k <= 10 else "tab20", k)
    for ax, m in zip(axes.flat, models):
        sub = labels if m is None else labels[labels["model"] == m]
        im = ax.imshow(_grid(sub, "cluster"), cmap=cmap, vmin=-0.5, vmax=k - 0.5, aspect="auto", origin="lower")
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(str(m)[-40:] if m is not None else "", fontsize=8)
    fig.colorbar(im, ax=list(axes.flat), ticks=range(k), label="cluster")
    fig.suptitle(title or "clusters")
    return _save(fig, path)


def js_mds(emb: "pd.DataFrame", path=None) -> "Figure":
    """Heads placed by MDS of their Jensen-Shannon distances, coloured by layer."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(5, 4.2))
    sc = ax.scatter(emb["x"], emb["y"], c=emb["layer"], cmap="viridis", s=28)
    for r in emb.itertuples():
        ax.annotate(f"{r.layer}.{r.head}", (r.x, r.y), fontsize=6, alpha=0.7)
    fig.colorbar(sc, ax=ax, label="layer")
    ax.set_title("heads by attention behaviour (MDS of JS distances)", fontsize=9)
    fig.tight_layout()
    return _save(fig, path)
