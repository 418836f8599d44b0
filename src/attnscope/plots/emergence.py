"""Figures of W_qk geometry over training (``attnscope emergence``), drawn from its tidy tables.

* :func:`plot_layer_trajectories` s and d of each layer against step (log axis): the layer form M_L that the
  tables report (or, as an option, the median over the layer's heads), a line per layer coloured by depth,
  one row per stack, each layer's formation step starred, y scaled to the data, and the training loss on
  the same steps below where the source recorded one (else a line saying it did not);
* :func:`plot_head_steps`          a step-indexed heat map: rows are heads (layer by layer), columns the
  revisions in training order, colour s or d (or behaviour: induction, previous token, sink);
  (``scores=RANKS``: the effective ranks of the routing and filtering parts, ``emergence --spectra``);
* :func:`plot_formation`           the step at which each head forms (layer x head, log colour scale),
  for s and d (the rule: :mod:`attnscope.emergence.formation`).

:func:`emergence_figures` yields ``(file name, Figure)`` for the CLI. The step axis is logarithmic; step 0
sits on its linear stretch (symlog, linear below the smallest positive step). Its ticks are round steps
(1, 2, 5 x 10^k over up to three decades, powers of ten beyond), thinned so that no two labels meet.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterator

from .base import figure_for, integer_ticks, model_label

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

SCORES = (("symmetry", "symmetry s"), ("directionality", "directionality d"))
#: the spectral panels (``emergence --spectra``): effective ranks of the antisymmetric and symmetric parts
RANKS = (("anti_rank", "routing anti_rank"), ("sym_rank", "filtering sym_rank"))
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


#: symlog's linear stretch, in decades of width (matplotlib's linscale)
_LINSCALE = 0.5


def _symlog_position(step: float, lin: float) -> float:
    """Where ``step`` sits on the symlog axis, in decades from 0 (what tick thinning measures)."""
    import math

    return _LINSCALE * step / lin if step < lin else _LINSCALE + math.log10(step / lin)


def step_ticks(steps: "list[float]", max_ticks: int = 8) -> list[float]:
    """Round ticks for a step axis over ``steps``: 0 where a step is 0, then 1-2-5 x 10^k between the smallest
    positive step and the largest (powers of ten where that spans more than three decades; the revisions'
    own steps where no round step falls inside), keeping a tick only when it sits at least 1/``max_ticks`` of
    the axis from the one before it, so that no two labels meet."""
    import math

    pos = sorted({float(s) for s in steps if s > 0})
    if not pos:
        return [0.0]
    lo, hi = pos[0], pos[-1]
    mults = (1, 2, 5) if hi / lo <= 1000 else (1,)
    cands = [m * 10.0 ** e for e in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1) for m in mults]
    cands = [c for c in cands if lo * (1 - 1e-9) <= c <= hi * (1 + 1e-9)]
    if len(cands) < 2:  # a narrow range (steps 100 to 150): the revisions' own steps
        cands = pos
    ticks = ([0.0] if min(steps) <= 0 else []) + cands
    span = _symlog_position(hi, lo) - _symlog_position(min(ticks), lo) or 1.0
    kept: list[float] = []
    for t in ticks:
        if not kept or _symlog_position(t, lo) - _symlog_position(kept[-1], lo) >= span / max_ticks:
            kept.append(t)
    return kept


def log_step_axis(ax: "Axes", steps: "list[float]", axis: str = "x", max_ticks: int = 8) -> None:
    """A log step axis that also shows step 0: symlog, linear below the smallest positive step; round ticks
    (:func:`step_ticks`) that never collide."""
    from matplotlib.ticker import NullLocator

    pos = [s for s in steps if s > 0]
    lin = min(pos) if pos else 1.0
    (ax.set_xscale if axis == "x" else ax.set_yscale)("symlog", linthresh=lin, linscale=_LINSCALE)
    ticks = step_ticks(list(steps), max_ticks)
    target = ax.xaxis if axis == "x" else ax.yaxis
    target.set_ticks(ticks, [step_label(t) for t in ticks])
    target.set_minor_locator(NullLocator())


#: the forms emergence_layers.png can draw: the tables' layer form, or the median over each layer's heads
CURVES = ("layer-form", "head-median")


def plot_layer_trajectories(table: "pd.DataFrame", title: str | None = None, *, curves: str = "layer-form",
                            formed: "pd.DataFrame | None" = None, loss: "pd.DataFrame | None" = None,
                            fig: "Figure | None" = None,
                            scores: "tuple[tuple[str, str], ...]" = SCORES) -> "Figure":
    """s and d of each layer against step (log axis); one line per layer (colour = depth), one row of two panels
    per stack, y scaled to the data. ``curves``: ``layer-form`` (the layer form M_L, the quantity of the tables
    and the console; the heads' median where the table has no layer rows) or ``head-median`` (the median over
    each layer's heads). ``formed``: a formation table (:func:`attnscope.emergence.formation`, layer form): each
    layer's formation step starred. ``loss``: ``step, loss[, eval_loss]`` (:func:`attnscope.emergence.revisions.
    training_loss`): a panel below on the same steps; None: a line says the source recorded none. ``scores``:
    the two (column, name) panels, :data:`SCORES` (s, d) or :data:`RANKS` (the effective ranks of
    ``emergence --spectra``)."""
    import matplotlib as mpl
    import numpy as np

    from attnscope.errors import InputError

    _check(table)
    if curves not in CURVES:
        raise InputError(f"curves must be {' or '.join(CURVES)}, not {curves!r}", params="curves")
    layers = table[table["level"] == "layer"]
    heads = table[table["level"] == "head"]
    if curves == "layer-form" and not layers.empty:
        rows, what, level = layers, "layer form M_L", "layer"
    else:
        rows = heads if not heads.empty else layers
        what, level = ("median over heads", "head") if not heads.empty else ("layer form M_L", "layer")
    stacks = list(dict.fromkeys(rows["stack"])) or ["encoder"]
    if loss is not None and not (len(loss) and loss.drop(columns="step").notna().any().any()):
        loss = None  # nothing recorded: said under the figure
    has_loss = loss is not None
    n_rows = len(stacks) + (1 if has_loss else 0)
    fig = figure_for(fig, figsize=(11, 3.4 * len(stacks) + (2.6 if has_loss else 0.4)))
    grid = fig.add_gridspec(n_rows, 2, height_ratios=[1.0] * len(stacks) + ([0.75] if has_loss else []))
    steps = sorted(set(rows["step"].astype(float)) | (set(loss["step"].astype(float)) if loss is not None else set()))
    layer_rows = formed[formed["level"] == "layer"] if formed is not None and level == "layer" and "level" in formed \
        else None
    marks = layer_rows[layer_rows["formed_step"].notna()] if layer_rows is not None else None
    bands = layer_rows if layer_rows is not None and "margin" in layer_rows else None
    cmap = mpl.colormaps["viridis"]
    first = None
    for r, stack in enumerate(stacks):
        grp = rows[rows["stack"] == stack]
        med = grp.groupby(["layer", "step"])[[col for col, _ in scores]].median().reset_index()
        n_layers = int(grp["layer"].max()) + 1 if not grp.empty else 1
        for c, (col, name) in enumerate(scores):
            ax = fig.add_subplot(grid[r, c], sharex=first)
            first = first or ax
            for layer, line in med.groupby("layer"):
                colour = cmap(layer / max(n_layers - 1, 1))
                ax.plot(line["step"].astype(float), line[col], color=colour, lw=1.6, marker="o", ms=3,
                        label=f"layer {layer}")
                if bands is not None:  # the noise band: initial +- the margin a change must exceed to form
                    for b in bands[(bands["stack"] == stack) & (bands["layer"] == layer)
                                   & (bands["metric"] == col)].itertuples():
                        if np.isfinite(b.initial) and np.isfinite(b.margin):
                            ax.axhspan(b.initial - b.margin, b.initial + b.margin, color=colour, alpha=0.07, lw=0,
                                       zorder=0)
                if marks is not None:
                    at = marks[(marks["stack"] == stack) & (marks["layer"] == layer) & (marks["metric"] == col)]
                    for b in at.itertuples():
                        step = float(b.formed_step)
                        y = line.loc[line["step"].astype(float) == step, col]
                        hollow = bool(getattr(b, "borderline", False))  # within 10% of its margin: hollow
                        ax.plot([step], y.to_numpy()[:1], marker="*", ms=13, color=colour, mec="black", mew=0.7,
                                mfc="white" if hollow else colour, ls="none", zorder=5)
                        low, high = getattr(b, "formed_step_low", np.nan), getattr(b, "formed_step_high", np.nan)
                        if len(y) and np.isfinite(low) and np.isfinite(high):  # the formation step's interval
                            ax.plot([low, high], [y.iloc[0]] * 2, color=colour, lw=3, alpha=0.45, zorder=4,
                                    solid_capstyle="butt")
            if scores is SCORES:
                ax.axhline(0, color="0.6", lw=0.6)
            ax.margins(y=0.12)
            log_step_axis(ax, steps)
            ax.set_xlabel("training step")
            ax.set_ylabel(f"{name.split()[-1]} ({what})")
            ax.set_title(f"{stack}: {name}, {what}", fontsize=10)
            ax.grid(alpha=0.25)
            if c == 1:
                if n_layers <= 12:
                    handles, labels = ax.get_legend_handles_labels()
                    if marks is not None and len(marks):
                        handles.append(mpl.lines.Line2D([], [], marker="*", ms=11, color="0.5", mec="black", ls="none"))
                        labels.append("forms (formation.csv), bar: 95% interval")
                        handles.append(mpl.lines.Line2D([], [], marker="*", ms=11, color="0.5", mfc="white",
                                                        mec="black", ls="none"))
                        labels.append("borderline (within 10% of its margin)")
                    if bands is not None and len(bands):
                        from matplotlib.patches import Patch

                        handles.append(Patch(color="0.5", alpha=0.2))
                        labels.append("noise band: initial +- margin")
                    ax.legend(handles, labels, fontsize=7, ncol=1 + n_layers // 7, frameon=False, loc="center left",
                              bbox_to_anchor=(1.01, 0.5))
                else:
                    sm = mpl.cm.ScalarMappable(cmap=cmap, norm=mpl.colors.Normalize(0, n_layers - 1))
                    fig.colorbar(sm, ax=ax, label="layer")
    if loss is not None:  # under each score column, on its step axis: training loss left, held-out loss right
        for c, (col, label) in enumerate((("loss", "training loss (mean since the previous log)"),
                                          ("eval_loss", "held-out loss"))):
            ax = fig.add_subplot(grid[-1, c], sharex=first)
            ok = loss[loss[col].notna()] if col in loss else loss.iloc[:0]
            if len(ok):
                ax.plot(ok["step"].astype(float), ok[col], color="0.2", lw=1.4, marker=".", ms=3)
            else:
                ax.text(0.5, 0.5, f"no {label} recorded", transform=ax.transAxes, ha="center", color="0.4")
            for step in sorted(set(rows["step"].astype(float))):
                ax.axvline(step, color="0.88", lw=0.6, zorder=0)
            log_step_axis(ax, steps)
            ax.margins(y=0.12)
            ax.set_xlabel("training step (grey: the revisions scored)")
            ax.set_ylabel("loss (nats/token)")
            ax.set_title(label, fontsize=10)
            ax.grid(alpha=0.25)
    else:
        fig.supxlabel("no training loss recorded with this source (a hub model's branches carry none; a checkpoint "
                      "folder only with trainer_state.json): no loss panel", fontsize=8, color="0.35")
    name = title or (model_label(str(table["model"].iloc[0])) if len(table) else "")
    fig.suptitle(name, fontsize=11)
    fig.set_layout_engine("constrained")
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
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

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
                bar = fig.colorbar(im, ax=ax, shrink=0.9, label="step (log)")
                bar.ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
                bar.ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: step_label(v)))
                bar.ax.yaxis.set_minor_locator(NullLocator())
    fig.supxlabel("grey: no formation (a change below --min-change or inside the trajectory's checkpoint noise; "
                  "formation.csv's outcome says which)", fontsize=8)
    if len(formed):
        fig.suptitle(title or model_label(str(formed["model"].iloc[0])), fontsize=11)
    return fig


def emergence_figures(table: "pd.DataFrame", formed: "pd.DataFrame | None", *, loss: "pd.DataFrame | None" = None,
                      curves: str = "layer-form") -> Iterator[tuple[str, "Figure"]]:
    """(file name, Figure) of every emergence figure of one sweep's table (with its formation table and the
    source's training loss where given; ``curves``: :data:`CURVES`)."""
    yield "emergence_layers.png", plot_layer_trajectories(table, curves=curves, formed=formed, loss=loss)
    if (table["level"] == "head").any():
        yield "emergence_heads.png", plot_head_steps(table)
        geo = formed[(formed["level"] == "head") & formed["metric"].isin([m for m, _ in SCORES])] \
            if formed is not None and len(formed) else None
        if geo is not None and len(geo) and geo["head"].notna().any():
            yield "emergence_formation.png", plot_formation(geo)
        if "anti_rank" in table.columns and table["anti_rank"].notna().any():  # emergence --spectra
            yield "emergence_ranks.png", plot_layer_trajectories(table, curves="head-median", formed=formed, loss=loss,
                                                                 scores=RANKS)
        beh = [c for c in ("induction_random", "previous_token_random", "sink_random") if c in table.columns
               and table[c].notna().any()]
        if beh:
            yield "emergence_behaviour.png", plot_head_steps(table, metrics=tuple(beh))
