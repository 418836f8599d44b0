"""Figures: matplotlib, one module per area (geometry, survey, training, heads, dynamics), one function
per figure, each taking tidy tables (the same tables the CLI writes) and returning or saving a figure.
Drawn with the Agg backend, so they work without a screen."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure


def new_figure(**kwargs: Any) -> "Figure":
    """A Figure on the Agg backend, not registered with pyplot (no global state, nothing to close)."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    from matplotlib.figure import Figure

    return Figure(**kwargs)


def pyplot():  # noqa: ANN201 - the matplotlib.pyplot module
    """matplotlib.pyplot on the Agg backend, for figure code written against pyplot."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig: "Figure", path: str | Path, dpi: int = 130, tight: bool = True) -> Path:
    """Write ``fig`` atomically (format from the extension, PNG by default) and release it."""
    from attnscope.tables import atomic_write_bytes

    path = Path(path)
    buf = io.BytesIO()
    fig.savefig(buf, format=path.suffix.lstrip(".") or "png", dpi=dpi, bbox_inches="tight" if tight else None)
    if fig.canvas.manager is not None:  # a pyplot figure: drop pyplot's reference
        pyplot().close(fig)
    return atomic_write_bytes(path, buf.getvalue())
