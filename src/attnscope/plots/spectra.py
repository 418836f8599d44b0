"""Figures of the spectra of W_qk's symmetric ("filtering") and antisymmetric ("routing") parts.

* :func:`plot_rank_cascade`  effective rank of the routing part and of the filtering part against
  relative depth (layer / layers), one line per model and stack: the median over each layer's heads,
  the IQR over heads as a band when the figure holds one model.

Takes the tidy table of :func:`attnscope.geometry.rank_cascade` (``rank_cascade(score(src, spectra=True))``)
and an optional ``fig``; returns the Figure.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import figure_for, model_label

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

#: the two panels: column, title
PANELS = (("anti_rank", "routing: effective rank of the antisymmetric part"),
          ("sym_rank", "filtering: effective rank of the symmetric part"))


def plot_rank_cascade(table: "pd.DataFrame", title: str | None = None, *, fig: "Figure | None" = None,
                      relative: bool = False) -> "Figure":
    """anti_rank and sym_rank against relative depth, one line per model (and stack); IQR bands for one model.

    relative: divide each rank by its largest possible value, 2 d_head (models with other head dims compare).
    """
    from matplotlib.lines import Line2D

    from attnscope.tables import check_table

    check_table(table, ("model", "stack", "relative_depth", "anti_rank", "sym_rank", *(("d_head",) if relative else ())),
                "table", "a rank cascade table (attnscope.geometry.rank_cascade)")
    fig = figure_for(fig, figsize=(10, 4.4))
    axes = fig.subplots(1, 2, sharex=True)
    groups = list(table.groupby(["model", "stack"], sort=False))
    one_model = table["model"].nunique() == 1
    colors = _colors(len(groups))
    handles: list = []
    level = str(table["level"].iloc[0]) if "level" in table.columns and len(table) else "head"
    for (model, stack), grp in groups:
        grp = grp.sort_values("relative_depth")
        color = colors.pop(0)
        multi_stack = table.loc[table["model"] == model, "stack"].nunique() > 1
        label = (stack if one_model else model_label(model)) + (f" · {stack}" if multi_stack and not one_model else "")
        if "d_head" in grp.columns and grp["d_head"].notna().any() and not one_model:
            label += f" (d_head {int(grp['d_head'].iloc[0])})"
        x = grp["relative_depth"].to_numpy(dtype=float)
        per = 2.0 * grp["d_head"].to_numpy(dtype=float) if relative else 1.0  # the largest possible rank
        for ax, (col, _) in zip(axes, PANELS):
            ax.plot(x, grp[col].to_numpy(dtype=float) / per, color=color, lw=1.6, marker="o", ms=3)
            if one_model and f"{col}_q1" in grp.columns:
                ax.fill_between(x, grp[f"{col}_q1"].to_numpy(dtype=float) / per,
                                grp[f"{col}_q3"].to_numpy(dtype=float) / per, color=color, alpha=0.18, lw=0)
        handles.append(Line2D([], [], color=color, lw=1.6, marker="o", ms=3, label=label))
    what = "median over heads" if level == "head" else "layer form"
    if not relative:
        axes[0].axhline(2, color="0.4", lw=0.9, ls=":")  # Jamil & Kapadia 2026: ~2 in the first layer
        handles.append(Line2D([], [], color="0.4", lw=0.9, ls=":", label="rank 2 (Jamil & Kapadia: first layer)"))
    for ax, (col, name) in zip(axes, PANELS):
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("relative depth (layer / layers)")
        ax.set_ylabel(f"{col} / 2 d_head ({what})" if relative else f"{col} ({what})")
        ax.set_xlim(-0.03, 1.0)
        ax.set_ylim(0, 1.02) if relative else ax.set_ylim(bottom=0)
        ax.grid(alpha=0.25)
    if one_model and level == "head":
        from matplotlib.patches import Patch

        handles.append(Patch(color="0.55", alpha=0.3, lw=0, label="band: IQR over heads"))
    fig.legend(handles=handles, loc="outside lower center", ncol=min(len(handles), 4), fontsize=8, frameon=False)
    fig.suptitle(title or (model_label(str(table["model"].iloc[0])) if one_model else
                           "effective rank (Roy & Vetterli) of W_qk's parts over depth"), fontsize=11)
    return fig


def _colors(n: int) -> list:
    """n distinguishable colours (tab10, then tab20, then a continuous map)."""
    from matplotlib import colormaps

    if n <= 10:
        return [colormaps["tab10"](i) for i in range(n)]
    if n <= 20:
        return [colormaps["tab20"](i) for i in range(n)]
    return [colormaps["viridis"](i / max(n - 1, 1)) for i in range(n)]
