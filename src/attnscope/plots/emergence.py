"""Figures of W_qk geometry over training (``attnscope emergence``), drawn from its tidy tables.

* :func:`plot_layer_trajectories` median s and d over each layer's heads against step (log axis), a
  line per layer coloured by depth, one row per stack;
* :func:`plot_head_steps`          a step-indexed heat map: rows are heads (layer by layer), columns the
  revisions in training order, colour s or d (or behaviour: induction, previous token, sink);
* :func:`plot_formation`           the step at which each head forms (layer x head, log colour scale),
  for s and d (the rule: :mod:`attnscope.emergence.formation`).

:func:`emergence_figures` yields ``(file name, Figure)`` for the CLI. The step axis is logarithmic; step 0
sits on its linear stretch (symlog, linear below the smallest positive step).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from .base import figure_for, integer_ticks, model_label

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

SCORES = (("symmetry", "symmetry s"), ("directionality", "directionality d"))
_NEEDS = ("model", "revision", "step", "stack", "level", "layer", "head", "symmetry", "directionality")


def _check(table: "pd.DataFrame") -> None:
    from attnscope.tables import check_table

    check_table(table, _NEEDS, "table", "an emergence table (attnscope.emergence.sweep(...).table)")


def step_label(step: float) -> str:
    """1500 -> '1.5k', 143000 -> '143k', 2e6 -> '2M'."""
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if step >= size:
            return f"{step / size:.3g}{unit}"
    return f"{step:g}"


def log_step_axis(ax: "Axes", steps: "list[float]", axis: str = "x", max_ticks: int = 8) -> None:
    """A log step axis that also shows step 0: symlog, linear below the smallest positive step; ticks at
    (at most ``max_ticks`` of) the revisions' own steps."""
    import numpy as np
    from matplotlib.ticker import NullLocator

    pos = [s for s in steps if s > 0]
    lin = min(pos) if pos else 1.0
    (ax.set_xscale if axis == "x" else ax.set_yscale)("symlog", linthresh=lin, linscale=0.5)
    ticks = sorted(set(steps))
    if len(ticks) > max_ticks:  # spread over the revisions, both ends kept
        ticks = [ticks[i] for i in sorted(set(np.linspace(0, len(ticks) - 1, max_ticks).round().astype(int)))]
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_ticks(ticks, [step_label(t) for t in ticks])
    target.set_minor_locator(NullLocator())


def plot_layer_trajectories(table: "pd.DataFrame", title: str | None = None, *, fig: "Figure | None" = None) -> "Figure":
    """Median over each layer's heads of s and d against step (log axis); one line per layer (colour = depth),
    one row of two panels per stack. A table with layer rows only draws the layer form M_L instead."""
    import matplotlib as mpl
    import numpy as np

    _check(table)
    heads = table[table["level"] == "head"]
    rows = heads if not heads.empty else table[table["level"] == "layer"]
    what = "median over heads" if not heads.empty else "layer form M_L"
    stacks = list(dict.fromkeys(rows["stack"])) or ["encoder"]
    fig = figure_for(fig, figsize=(10, 3.6 * len(stacks)))
    axes = np.atleast_2d(fig.subplots(len(stacks), 2, squeeze=False))
    steps = sorted(set(rows["step"].astype(float)))
    for r, stack in enumerate(stacks):
        grp = rows[rows["stack"] == stack]
        med = grp.groupby(["layer", "step"])[["symmetry", "directionality"]].median().reset_index()
        n_layers = int(grp["layer"].max()) + 1 if not grp.empty else 1
        cmap = mpl.colormaps["viridis"]
        for c, (col, name) in enumerate(SCORES):
            ax = axes[r, c]
            for layer, line in med.groupby("layer"):
                ax.plot(line["step"].astype(float), line[col], color=cmap(layer / max(n_layers - 1, 1)), lw=1.6,
                        marker="o", ms=3, label=f"layer {layer}")
            ax.axhline(0, color="0.6", lw=0.6)
            log_step_axis(ax, steps)
            ax.set_ylim(-1.02, 1.02)
            ax.set_xlabel("training step")
            ax.set_ylabel(f"{name} ({what})")
            ax.set_title(f"{stack}: {name}", fontsize=10)
            ax.grid(alpha=0.25)
        if n_layers <= 12:
            axes[r, 1].legend(fontsize=7, ncol=1 + n_layers // 7, frameon=False, loc="best")
        else:
            sm = mpl.cm.ScalarMappable(cmap=cmap, norm=mpl.colors.Normalize(0, n_layers - 1))
            fig.colorbar(sm, ax=axes[r, 1], label="layer")
    fig.suptitle(title or model_label(str(table["model"].iloc[0])) if len(table) else (title or ""), fontsize=11)
    return fig


def plot_head_steps(table: "pd.DataFrame", title: str | None = None, *, metrics: "tuple[str, ...] | None" = None,
                    fig: "Figure | None" = None) -> "Figure":
    """Step-indexed heat maps: one row per head (layer by layer, layer 0 at the bottom), one column per revision
    in training order (labelled by step), colour s or d (-1 to 1; ``metrics``: other columns of the table, such
    as ``induction_random``, each on its own scale); one row of panels per stack."""
    import numpy as np

    from .base import color_scale

    _check(table)
    shown_metrics = SCORES if metrics is None else tuple((m, m.replace("_", " ")) for m in metrics)
    heads = table[table["level"] == "head"]
    stacks = list(dict.fromkeys(heads["stack"])) or ["encoder"]
    revs = list(dict.fromkeys(table["revision"]))
    step_of = table.drop_duplicates("revision").set_index("revision")["step"]
    n_rows = max(heads.groupby("stack")[["layer", "head"]].apply(lambda g: len(g.drop_duplicates())).max()
                 if not heads.empty else 1, 1)
    fig = figure_for(fig, figsize=(min(16, 4 + 0.25 * len(revs)) * 1.6, min(10, 1.5 + 0.12 * n_rows) * len(stacks)))
    axes = np.atleast_2d(fig.subplots(len(stacks), len(shown_metrics), squeeze=False))
    for r, stack in enumerate(stacks):
        grp = heads[heads["stack"] == stack]
        ids = grp[["layer", "head"]].drop_duplicates().sort_values(["layer", "head"])
        row_of = {(int(a), int(b)): i for i, (a, b) in enumerate(ids.itertuples(index=False))}
        col_of = {rev: j for j, rev in enumerate(revs)}
        for c, (col, name) in enumerate(shown_metrics):
            grid = np.full((max(len(row_of), 1), len(revs)), np.nan)  # [heads, revisions]
            if not grp.empty:
                ri = [row_of[(int(a), int(b))] for a, b in zip(grp["layer"], grp["head"])]
                ci = [col_of[v] for v in grp["revision"]]
                grid[ri, ci] = grp[col].to_numpy(float)
            ax = axes[r, c]
            if metrics is None:
                scale = {"cmap": "RdBu_r", "vmin": -1, "vmax": 1}
            elif col.startswith(("induction", "previous_token", "sink", "entropy_norm")):  # fractions: 0 to 1
                scale = {"cmap": "viridis", "vmin": 0, "vmax": 1}
            else:
                scale = color_scale(grid)
            im = ax.imshow(grid, aspect="auto", origin="lower", interpolation="nearest", **scale)
            ax.set_title(f"{stack}: {name}", fontsize=10)
            ax.set_xlabel("training step")
            ax.set_ylabel("head (layer by layer)")
            cols = np.arange(len(revs))
            shown = cols[:: max(1, len(revs) // 10)]
            ax.set_xticks(shown, [step_label(step_of[revs[j]]) for j in shown], rotation=45, fontsize=7, ha="right")
            starts = [row_of[k] for k in row_of if k[1] == min(h for (la, h) in row_of if la == k[0])]
            layers = sorted({k[0] for k in row_of})
            for y in starts[1:]:
                ax.axhline(y - 0.5, color="0.3", lw=0.4)
            ax.set_yticks(starts, [f"L{la}" for la in layers], fontsize=7)
            fig.colorbar(im, ax=ax, shrink=0.9, label=name)
    if len(table):
        fig.suptitle(title or model_label(str(table["model"].iloc[0])), fontsize=11)
    return fig


def plot_formation(formed: "pd.DataFrame", title: str | None = None, *, fig: "Figure | None" = None) -> "Figure":
    """Layer x head maps of the step at which each head forms (log colour scale; grey: no formation), for s
    and d; one row per stack. ``formed``: :func:`attnscope.emergence.formation` of the head rows."""
    import matplotlib as mpl
    import numpy as np

    from attnscope.tables import check_table

    check_table(formed, ("model", "stack", "layer", "head", "metric", "formed_step"), "formed",
                "a formation table (attnscope.emergence.formation)")
    stacks = list(dict.fromkeys(formed["stack"])) or ["encoder"]
    n_heads = int(formed["head"].max()) + 1 if formed["head"].notna().any() else 1
    n_layers = int(formed["layer"].max()) + 1 if len(formed) else 1
    fig = figure_for(fig, figsize=(min(16, 2 * (2 + 0.35 * n_heads)), min(9, 1.2 + 0.3 * n_layers) * len(stacks) + 0.6))
    axes = np.atleast_2d(fig.subplots(len(stacks), 2, squeeze=False))
    steps = formed["formed_step"].dropna().astype(float)
    pos = steps[steps > 0]
    norm = mpl.colors.LogNorm(vmin=float(pos.min()), vmax=float(max(pos.max(), pos.min() + 1))) if len(pos) else None
    cmap = mpl.colormaps["viridis"].with_extremes(bad="0.85")
    for r, stack in enumerate(stacks):
        for c, (col, name) in enumerate(SCORES):
            sub = formed[(formed["stack"] == stack) & (formed["metric"] == col)]
            grid = np.full((n_layers, n_heads), np.nan)
            if len(sub):
                vals = sub["formed_step"].astype("float64").to_numpy()
                grid[sub["layer"].astype(int), sub["head"].astype(int)] = np.where(vals > 0, vals, np.nan)
            ax = axes[r, c]
            im = ax.imshow(np.ma.masked_invalid(grid), cmap=cmap, norm=norm, aspect="auto", origin="lower",
                           interpolation="nearest")
            ax.set_xlabel("head")
            ax.set_ylabel("layer")
            ax.set_title(f"{stack}: {name} forms at step", fontsize=10)
            integer_ticks(ax.xaxis, n_heads)
            integer_ticks(ax.yaxis, n_layers)
            if norm is not None:
                fig.colorbar(im, ax=ax, shrink=0.9, label="step (log)")
    fig.supxlabel("grey: no formation (change below the threshold, or formed at the first revision)", fontsize=8)
    if len(formed):
        fig.suptitle(title or model_label(str(formed["model"].iloc[0])), fontsize=11)
    return fig


def emergence_figures(table: "pd.DataFrame", formed: "pd.DataFrame | None") -> Iterator[tuple[str, "Figure"]]:
    """(file name, Figure) of every emergence figure of one sweep's table (and its formation table)."""
    yield "emergence_layers.png", plot_layer_trajectories(table)
    if (table["level"] == "head").any():
        yield "emergence_heads.png", plot_head_steps(table)
        if formed is not None and len(formed) and formed["head"].notna().any():
            yield "emergence_formation.png", plot_formation(formed)
        beh = [c for c in ("induction_random", "previous_token_random", "sink_random") if c in table.columns
               and table[c].notna().any()]
        if beh:
            yield "emergence_behaviour.png", plot_head_steps(table, metrics=tuple(beh))
