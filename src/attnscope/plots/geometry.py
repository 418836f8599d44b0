"""Figures of W_qk geometry, drawn from tidy score tables (matplotlib, Agg backend).

One function per figure, each taking data and an optional ``fig`` / ``ax`` and returning the Figure:

* :func:`plot_layer_curves`  s and d of the layer form per layer, with the head IQR as a band;
* :func:`plot_head_heatmaps` layer x head heatmaps of s and d, one row per stack;
* :func:`plot_wqk_block`     the explicit block M[:50, :50] of one layer (diverging, centred at 0).

:func:`geometry_figures` draws the whole set for every model of a table and yields
``(file name, Figure)`` pairs; the caller saves them (:func:`attnscope.plots.save_figure`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator, Mapping

from .base import axes_for, figure_for, integer_ticks, model_label

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

#: the paper's colours: encoders navy, decoders purple; cross-attention teal
STACK_COLORS = {"encoder": "#1f2a6b", "decoder": "#7b2d8e", "cross": "#2a8c82"}
SCORES = (("symmetry", "symmetry s"), ("directionality", "directionality d"))


def slug(model: str) -> str:
    """A model's name in file names: its canonical id made file-name safe (:func:`attnscope.naming.model_file_stem`)."""
    from attnscope.naming import model_file_stem

    return model_file_stem(model)


def plot_layer_curves(df: "pd.DataFrame", title: str | None = None, *, fig: "Figure | None" = None) -> "Figure":
    """s and d of each layer's M_L (lines), the IQR over heads (bands), median over layers (dotted)."""
    import numpy as np
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from attnscope.tables import SCORE_COLUMNS, check_table

    check_table(df, SCORE_COLUMNS, "df", "a score table from geometry.score()")

    fig = figure_for(fig, figsize=(10, 4.2))
    axes = fig.subplots(1, 2, sharex=True)
    groups = list(df.groupby(["model", "stack"], sort=False))
    many = df["model"].nunique() > 1
    handles: list = []
    has_band = has_median = False
    for (model, stack), grp in groups:
        color = STACK_COLORS.get(stack, "black")
        label = f"{model_label(model)} · {stack}" if many else stack
        lay = grp[grp["level"] == "layer"].sort_values("layer")
        heads = grp[grp["level"] == "head"]
        for ax, (col, _) in zip(axes, SCORES):
            if not heads.empty:
                q = heads.groupby("layer")[col].quantile([0.25, 0.5, 0.75]).unstack()
                x = q.index.to_numpy(dtype=float)
                ax.fill_between(x, q[0.25], q[0.75], color=color, alpha=0.18, lw=0)
                has_band = True
                if lay.empty:  # no layer rows: the median over heads is the curve
                    ax.plot(x, q[0.5], color=color, lw=1.8, marker="o", ms=3.5)
            if not lay.empty:
                x, y = lay["layer"].to_numpy(dtype=float), lay[col].to_numpy(dtype=float)
                ax.plot(x, y, color=color, lw=1.8, marker="o", ms=3.5)
                if np.isfinite(y).any():
                    ax.axhline(np.nanmedian(y), color=color, lw=0.9, ls=":")
                    has_median = True
        handles.append(Line2D([], [], color=color, lw=1.8, marker="o", ms=3.5, label=label))
    curve = "layer form M_L" if (df["level"] == "layer").any() else "median over heads"
    if has_band:
        handles.append(Patch(color="0.55", alpha=0.3, lw=0, label="band: IQR over heads"))
    if has_median:
        handles.append(Line2D([], [], color="0.3", lw=0.9, ls=":", label="dotted: median over layers"))
    for ax, (col, name) in zip(axes, SCORES):
        ax.axhline(0, color="0.6", lw=0.6)
        ax.set_ylim(-1.02, 1.02)
        ax.set_xlabel("layer")
        ax.set_ylabel(f"{name} of {curve}")
        ax.grid(alpha=0.25)
        ax.xaxis.get_major_locator().set_params(integer=True)
    axes[0].set_title("symmetry (+1 symmetric, -1 skew)")
    axes[1].set_title("directionality (< 0: dominant columns)")
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 5), fontsize=8, frameon=False)
    if title or not many:
        fig.suptitle(title or model_label(str(df["model"].iloc[0])), fontsize=11)
    return fig


def plot_head_heatmaps(df: "pd.DataFrame", title: str | None = None, *, fig: "Figure | None" = None) -> "Figure":
    """Layer x head heatmaps of s and d (diverging, -1..1), one row per stack; one model's head rows."""
    import numpy as np

    heads = df[df["level"] == "head"]
    stacks = list(dict.fromkeys(heads["stack"])) or ["encoder"]
    n_all = max(int(heads["layer"].max()) + 1 if not heads.empty else 1, 1)
    n_heads = max(int(heads["head"].max()) + 1 if not heads.empty else 1, 1)
    width = min(max(6.0, 2 * (1.6 + 0.28 * n_heads)), 16.0)
    height = min(max(2.2, 0.7 + 0.24 * n_all), 9.0) * len(stacks)
    fig = figure_for(fig, figsize=(width, height))
    axes = np.atleast_2d(fig.subplots(len(stacks), 2, squeeze=False))
    for row, stack in enumerate(stacks):
        grp = heads[heads["stack"] == stack]
        n_layers = int(grp["layer"].max()) + 1 if not grp.empty else 1
        for col_i, (col, name) in enumerate(SCORES):
            grid = np.full((n_layers, n_heads), np.nan)
            if not grp.empty:
                grid[grp["layer"].to_numpy(int), grp["head"].to_numpy(int)] = grp[col].to_numpy(float)
            ax = axes[row, col_i]
            im = ax.imshow(grid, cmap="RdBu_r", vmin=-1, vmax=1, aspect="auto", origin="lower",
                           interpolation="nearest")  # layer 0 at the bottom, as in the heads figures
            ax.set_xlabel("head")
            ax.set_ylabel("layer")
            ax.set_title(f"{stack}: {name}", fontsize=10)
            integer_ticks(ax.xaxis, n_heads)
            integer_ticks(ax.yaxis, n_layers)
            fig.colorbar(im, ax=ax, shrink=0.9, label=name)
    if title or not heads.empty:
        fig.suptitle(title or model_label(str(heads["model"].iloc[0])), fontsize=11)
    return fig


def plot_wqk_block(block: "np.ndarray", title: str = "", *, ax: "Axes | None" = None) -> "Figure":
    """Heatmap of an explicit block of W_qk (rows = query dims, columns = key dims), centred at 0."""
    import numpy as np

    block = np.asarray(block, dtype=np.float64)
    vmax = float(np.nanmax(np.abs(block))) if block.size and np.isfinite(block).any() else 1.0
    fig, ax = axes_for(ax, figsize=(5.4, 4.6))
    im = ax.imshow(block, cmap="RdBu_r", vmin=-vmax or -1, vmax=vmax or 1, interpolation="nearest")
    ax.set_xlabel("key dimension j (column)")
    ax.set_ylabel("query dimension i (row)")
    ax.set_title(title or f"W_qk[:{block.shape[0]}, :{block.shape[1]}]", fontsize=10)
    fig.colorbar(im, ax=ax, shrink=0.85, label="entry of W_qk (signed; white = 0)")
    return fig


def geometry_figures(
    df: "pd.DataFrame", blocks: Mapping[tuple[str, str, int], "np.ndarray"] | None = None,
    cascade: "pd.DataFrame | None" = None,
) -> Iterator[tuple[str, "Figure"]]:
    """Every figure of every model of a score table as ``(file name, Figure)``, drawn one at a time.

    ``<model>_layers.png`` and ``<model>_heads.png`` (when the table has head rows) per model,
    ``<model>_spectra.png`` (:func:`attnscope.plots.spectra.plot_rank_cascade`) for each model of
    ``cascade`` (a :func:`attnscope.geometry.rank_cascade` table), and ``<model>_wqk_<stack>_L<layer>.png``
    for each block of ``blocks`` ((model, stack, layer) -> M block).
    """
    used: set[str] = set()
    for model, grp in df.groupby("model", sort=False):
        name = slug(model)
        while name in used:
            name += "_"
        used.add(name)
        yield f"{name}_layers.png", plot_layer_curves(grp)
        if (grp["level"] == "head").any():
            yield f"{name}_heads.png", plot_head_heatmaps(grp)
        if cascade is not None and (cascade["model"] == model).any():
            from .spectra import plot_rank_cascade

            yield f"{name}_spectra.png", plot_rank_cascade(cascade[cascade["model"] == model])
        for (b_model, stack, layer), block in (blocks or {}).items():
            if b_model == model:
                title = f"{model_label(model)} · {stack} layer {layer}: W_qk[:{block.shape[0]}, :{block.shape[1]}]"
                yield f"{name}_wqk_{stack}_L{layer}.png", plot_wqk_block(block, title)
