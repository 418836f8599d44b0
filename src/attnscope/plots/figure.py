"""The Figure class every attnscope figure is drawn on: matplotlib's own, shown as an image in a notebook.

attnscope never chooses a matplotlib backend and never registers a figure with pyplot: a figure is a
plain :class:`matplotlib.figure.Figure` (no screen needed, nothing to close, the user's pyplot state
untouched). A plain Figure that pyplot never made is shown by Jupyter only as the text
``<Figure size ...>`` until the user's own pyplot code has set the inline backend up; this subclass
adds ``_repr_png_``, so the figure a cell returns shows as a PNG in any kernel. Where the inline
backend is set up, its own formatter (and the user's ``InlineBackend`` settings) wins.
"""

from __future__ import annotations

import io

from matplotlib.figure import Figure as _MplFigure


class Figure(_MplFigure):
    """A :class:`matplotlib.figure.Figure` that a notebook displays as a PNG."""

    def _repr_png_(self) -> bytes:
        buf = io.BytesIO()
        self.savefig(buf, format="png", bbox_inches="tight")
        return buf.getvalue()
