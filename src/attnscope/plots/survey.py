"""Figures of a zoo survey, like the paper's: scores against model size, encoder vs decoder.

Each function takes the summary table of :func:`attnscope.zoo.report.survey_summary` (one row per model
and stack) and an optional ``fig``, and returns the matplotlib Figure; ``attnscope geometry plot`` saves
them as ``survey_scores.png`` and ``survey_encdec.png``:

* :func:`plot_scores_vs_params`  s and d (median over layers, 25-75 % bars) against the number of
  parameters (log x), encoders navy and decoders purple, one column of panels per modality;
* :func:`plot_encoder_decoder`   encoder vs decoder (and cross-attention) stacks of encoder-decoder
  models, side by side per model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from attnscope.zoo.registry import MODALITY_ORDER, STACK_ORDER

from .base import cheaper_label, figure_for, laid_out, model_label
from .geometry import STACK_COLORS

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

SCORE_LABELS = {"symmetry": "symmetry s", "directionality": "directionality d"}



def plot_scores_vs_params(
    summary: "pd.DataFrame", annotate_max: int = 10, show_paper: bool = True, *, fig: "Figure | None" = None
) -> "Figure | None":
    """s and d vs number of parameters (log x), median over layers with 25-75 % bars; a column per modality.

    Self-attention stacks only (encoder navy, decoder purple); models without a parameter count are left
    out (None when no model has one). Points are labelled with the model name in panels of at most ``annotate_max`` models; hollow
    markers show the paper's published medians where the registry has them (``show_paper``).
    """
    import numpy as np

    data = summary[summary["stack"].isin(["encoder", "decoder"])].copy()
    data["params"] = data["params"].astype(float)
    data = data[np.isfinite(data["params"]) & (data["params"] > 0)]
    if data.empty:
        return None
    mods = [m for m in MODALITY_ORDER if m in set(data["modality"])] + sorted(
        {m for m in data["modality"].dropna() if m not in MODALITY_ORDER})
    fig = figure_for(fig, figsize=(max(6.4, 4.2 * len(mods)), 6.4))
    axes = np.atleast_2d(fig.subplots(2, len(mods), sharex="col", sharey="row", squeeze=False))
    to_label: list[tuple[Any, pd.DataFrame, str]] = []
    for j, mod in enumerate(mods):
        sub = data[data["modality"] == mod]
        for i, col in enumerate(("symmetry", "directionality")):
            ax = axes[i, j]
            for stack in ("encoder", "decoder"):
                s = sub[sub["stack"] == stack]
                if s.empty:
                    continue
                med = s[f"{col}_median"].to_numpy(float)
                err = np.vstack([med - s[f"{col}_q1"].to_numpy(float), s[f"{col}_q3"].to_numpy(float) - med])
                ax.errorbar(s["params"], med, yerr=np.clip(err, 0, None), fmt="o", ms=5, capsize=2, lw=1,
                            color=STACK_COLORS[stack], label=f"{stack}s ({len(s)})")
                paper_col = f"paper_{col}_median"
                if show_paper and paper_col in s.columns and s[paper_col].notna().any():
                    ax.plot(s["params"], s[paper_col].astype(float), "o", ms=7, mfc="none", alpha=0.6,
                            color=STACK_COLORS[stack], label=f"{stack}s, paper")
            ax.axhline(0, color="0.6", lw=0.6, zorder=0)
            ax.set_xscale("log")
            lo, hi = float(sub["params"].min()), float(sub["params"].max())
            ax.set_xlim(lo / 2, hi * 2)  # also keeps a single-model panel from collapsing
            ax.set_ylim(-1.05, 1.05)
            _count_ticks(ax.xaxis)
            if sub["model"].nunique() <= annotate_max:
                to_label.append((ax, sub, f"{col}_median"))
            if i == 0:
                ax.set_title(mod)
            if i == 1:
                ax.set_xlabel("number of parameters")
            if j == 0:
                ax.set_ylabel(SCORE_LABELS[col] + " (median over layers)")
            if i == 0:
                ax.legend(loc="lower left", fontsize=8, frameon=False)
    fig.suptitle("W_qk geometry across models (bars: 25-75 % over layers)")
    if to_label:
        renderer = laid_out(fig)
        for ax, sub, col in to_label:
            _label_points(ax, sub, col, renderer)
    return fig


def _count_ticks(axis: "Any") -> None:
    """Log-axis ticks at 1, 2, 5 x 10^k labelled 20M, 500M, 1B (no overlapping minor-tick labels)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    def human(x: float, _pos: int) -> str:
        for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
            if x >= scale:
                return f"{x / scale:.3g}{unit}"
        return f"{x:.3g}"

    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(human))
    axis.set_minor_formatter(NullFormatter())


def _label_points(ax: "Any", sub: "pd.DataFrame", col: str, renderer: Any) -> None:
    """Name each point at the place (right/left x above/below; left first in the right part of the panel)
    where its name overlaps the fewest names already placed and stays inside the axes."""
    import numpy as np

    def overlap(a: Any, b: Any) -> float:
        return max(0.0, min(a.x1, b.x1) - max(a.x0, b.x0)) * max(0.0, min(a.y1, b.y1) - max(a.y0, b.y0))

    rows = sub[np.isfinite(sub[col].astype(float))]
    inside = ax.get_window_extent(renderer)
    placed: list[Any] = []
    for x, y, m, stack in zip(rows["params"], rows[col].astype(float), rows["model"], rows["stack"]):
        fx = ax.transAxes.inverted().transform(ax.transData.transform((x, y)))[0]
        sides = (-1, 1) if fx > 0.55 else (1, -1)
        best = None
        for side in sides:
            for dy in (3, -9):
                text = ax.annotate(model_label(m).split("/")[-1], (x, y), xytext=(4 * side, dy),
                                   textcoords="offset points", ha="left" if side > 0 else "right", fontsize=6.5,
                                   color=STACK_COLORS[stack])
                box = text.get_window_extent(renderer)
                outside = box.width * box.height - overlap(box, inside)
                cost = 10 * outside + sum(overlap(box, other) for other in placed)
                best = cheaper_label(best, cost, text, box)
        placed.append(best[2])


def plot_encoder_decoder(summary: "pd.DataFrame", *, fig: "Figure | None" = None) -> "Figure | None":
    """Encoder vs decoder (and cross-attention) stacks of encoder-decoder models, side by side per model;
    None when the summary has no encoder-decoder model."""
    import numpy as np

    data = summary[summary["type"] == "encoder-decoder"]
    models = list(dict.fromkeys(data["model"]))
    if not models:
        return None
    stacks = [s for s in STACK_ORDER if s in set(data["stack"])]
    width = 0.8 / len(stacks)
    fig = figure_for(fig, figsize=(max(4.5, 0.9 * len(models) + 2), 6.0))
    axes = fig.subplots(2, 1, sharex=True)
    x = np.arange(len(models))
    for ax, col in zip(axes, ("symmetry", "directionality")):
        for k, stack in enumerate(stacks):
            s = data[data["stack"] == stack].set_index("model").reindex(models)
            med = s[f"{col}_median"].to_numpy(float)
            err = np.vstack([med - s[f"{col}_q1"].to_numpy(float), s[f"{col}_q3"].to_numpy(float) - med])
            ax.errorbar(x + (k - (len(stacks) - 1) / 2) * width, med, yerr=np.clip(np.nan_to_num(err), 0, None),
                        fmt="s", ms=6, capsize=2, lw=1, color=STACK_COLORS[stack], label=stack)
        ax.axhline(0, color="0.6", lw=0.6, zorder=0)
        ax.set_ylim(-1.05, 1.05)
        ax.set_ylabel(SCORE_LABELS[col])
    axes[0].legend(loc="lower left", fontsize=8, frameon=False, ncol=len(stacks))
    axes[1].set_xlim(-0.6, len(models) - 0.4)
    axes[1].set_xticks(x)
    axes[1].set_xticklabels([model_label(m).split("/")[-1] for m in models], rotation=35, ha="right", fontsize=8)
    fig.suptitle("encoder-decoder models, stack by stack\n(median and 25-75 % over layers)", fontsize=10)
    return fig
