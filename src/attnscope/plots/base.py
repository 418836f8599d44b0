"""The helpers every figure module shares: a Figure to draw on (new, or the caller's ``ax`` / ``fig``),
integer ticks on index axes, a label's cheapest place, a model's readable name, and the one atomic writer (see :mod:`attnscope.plots`
for the convention)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from attnscope.naming import model_label  # re-exported: titles name models the way every room does

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure


def new_figure(**kwargs: Any) -> "Figure":
    """A Figure not registered with pyplot: no backend is chosen (the user's stays), no screen is needed,
    nothing to close; a notebook shows it as an image (:mod:`attnscope.plots.figure`)."""
    from .figure import Figure

    return Figure(**kwargs)


def axes_for(ax: "Axes | None", **figure_kwargs: Any) -> tuple["Figure", "Axes"]:
    """The caller's ``ax`` and its figure, or a new figure (``figure_kwargs``) with one axes."""
    if ax is not None:
        return ax.get_figure(root=True), ax
    fig = new_figure(layout="constrained", **figure_kwargs)
    return fig, fig.add_subplot()


def figure_for(fig: "Figure | None", **figure_kwargs: Any) -> "Figure":
    """The caller's (empty) ``fig`` to fill with panels, or a new constrained-layout figure."""
    return fig if fig is not None else new_figure(layout="constrained", **figure_kwargs)


def cheaper_label(best: "tuple | None", cost: Any, text: Any, box: Any) -> tuple:
    """Of two candidate places for a label, the cheaper: ``best`` (cost, text, box; None at first) or this one.
    The other's text is taken off the axes, so trying places leaves one label drawn."""
    if best is None or cost < best[0]:
        if best is not None:
            best[1].remove()
        return (cost, text, box)
    text.remove()
    return best


def integer_ticks(axis: Any, n: int, max_ticks: int = 12) -> None:
    """Integer ticks (at most ``max_ticks``) on ``axis`` (``ax.xaxis`` / ``ax.yaxis``) of an index grid of
    ``n`` rows or columns. How many fit is decided when the figure is drawn, from the axis' length
    and the tick font (matplotlib's ``nbins="auto"``), so ``10`` and ``11`` never run together into
    ``1011`` on a narrow panel; every tick is an index inside the grid."""
    from matplotlib.ticker import MaxNLocator

    class _Inside(MaxNLocator):
        def tick_values(self, vmin: float, vmax: float) -> Any:
            ticks = super().tick_values(vmin, vmax)
            return ticks[(ticks >= 0) & (ticks <= max(n - 1, 0))][:max_ticks]

    axis.set_major_locator(_Inside(nbins="auto", integer=True, steps=[1, 2, 4, 5, 10], min_n_ticks=1))


#: the colormap of a quantity with a sign (diverging, white at 0) and of one without
DIVERGING_CMAP = "RdBu_r"
SEQUENTIAL_CMAP = "viridis"


def color_scale(values: Any, signed: bool | None = None) -> dict[str, Any]:
    """``imshow`` / ``scatter`` colour arguments for ``values``: a signed quantity (``signed=True``, or
    ``None`` and values on both sides of 0) gets the diverging map centred at 0 (symmetric limits, so
    white is 0), anything else the sequential one."""
    import numpy as np

    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    if signed is None:
        signed = bool(v.size) and v.min() < 0 < v.max()
    if not signed:
        return {"cmap": SEQUENTIAL_CMAP}
    m = float(np.abs(v).max()) if v.size else 1.0
    m = m if m > 0 else 1.0
    return {"cmap": DIVERGING_CMAP, "vmin": -m, "vmax": m}


def drop_overlapping(texts: list[Any], renderer: Any, pad: float = 1.0) -> list[Any]:
    """Remove every text whose box overlaps one kept before it (give the important ones first);
    return the kept texts. ``renderer``: from :func:`laid_out`."""
    kept, boxes = [], []
    for t in texts:
        box = t.get_window_extent(renderer).expanded(1.0 + pad / 100, 1.0 + pad / 100)
        if any(box.overlaps(b) for b in boxes):
            t.remove()
        else:
            kept.append(t)
            boxes.append(box)
    return kept


def laid_out(fig: "Figure") -> Any:
    """Run the figure's layout and return a renderer, so text extents are the final ones."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas if hasattr(fig.canvas, "get_renderer") else FigureCanvasAgg(fig)
    fig.draw_without_rendering()
    return canvas.get_renderer()


#: resolution of every saved figure unless a caller asks otherwise: print quality (a 6-inch panel is 1200
#: pixels wide); a typical figure is 50-250 KB as PNG at this resolution
DPI = 200


def save_figure(fig: "Figure", path: str | Path, dpi: int = DPI, tight: bool = True) -> Path:
    """Write ``fig`` atomically (format from the extension, PNG by default; ``dpi``: 200, for print); return the path."""
    from attnscope.tables import atomic_write_bytes

    path = Path(path)
    return atomic_write_bytes(path, figure_bytes(fig, path.suffix.lstrip(".") or "png", dpi, tight))


def figure_bytes(fig: "Figure", fmt: str = "png", dpi: int = DPI, tight: bool = True) -> bytes:
    """``fig`` rendered as a ``fmt`` file's bytes (the slow part of saving: a writer that must not leave a
    half-written set renders every figure first, then writes them all)."""
    buf = io.BytesIO()
    fig.savefig(buf, format=fmt, dpi=dpi, bbox_inches="tight" if tight else None)
    return buf.getvalue()


def integer_colors(lo: int, hi: int, cmap: str = SEQUENTIAL_CMAP) -> dict[str, Any]:
    """``scatter`` colour arguments for an integer quantity from ``lo`` to ``hi`` (a layer): one colour per
    value (a :class:`~matplotlib.colors.BoundaryNorm` with a boundary half-way between neighbours), so a colour
    bar drawn from it shows blocks, not a continuous scale; give it :func:`integer_colorbar`'s ticks."""
    import matplotlib as mpl
    import numpy as np
    from matplotlib.colors import BoundaryNorm

    lo, hi = int(lo), int(max(hi, lo))
    n = hi - lo + 1
    return {"cmap": mpl.colormaps[cmap].resampled(n),
            "norm": BoundaryNorm(np.arange(lo - 0.5, hi + 1.0, 1.0), n)}


def integer_colorbar(fig: "Figure", mappable: Any, ax: Any, label: str, max_ticks: int = 10, **kwargs: Any) -> Any:
    """A colour bar of :func:`integer_colors` with whole-number ticks at the blocks' centres (at most
    ``max_ticks`` of them, at multiples of 1, 2, 5 or 10)."""
    from matplotlib.ticker import MaxNLocator

    bounds = mappable.norm.boundaries
    lo, hi = int(round(bounds[0] + 0.5)), int(round(bounds[-1] - 0.5))
    ticks = MaxNLocator(nbins=max_ticks, integer=True, steps=[1, 2, 5, 10]).tick_values(lo, hi)
    ticks = [int(t) for t in ticks if lo <= t <= hi] or [lo]
    return fig.colorbar(mappable, ax=ax, label=label, ticks=ticks, **kwargs)
