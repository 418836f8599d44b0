"""Figures: matplotlib, one module per area (geometry, survey, training, heads, dynamics), one function
per figure. Drawn on the Agg backend without pyplot, so they work without a screen and hold no global
state.

The one convention (as scikit-learn's displays and seaborn): a figure function takes data (tidy tables or
arrays), an optional ``ax`` (single-panel figures) or ``fig`` (multi-panel figures) to draw into, and
returns the matplotlib Figure. No figure function writes a file; the caller saves it with
:func:`save_figure` (atomic). The helpers every module shares (in :mod:`attnscope.plots.base`, exported here):

* :func:`new_figure` / :func:`axes_for` / :func:`figure_for`  a Figure (or the caller's) to draw on;
* :func:`integer_ticks`  integer-only ticks on an axis of layer or head indices, as many as fit;
* :func:`color_scale`    the colormap of a quantity: diverging and centred at 0 when it has a sign;
* :func:`drop_overlapping` / :func:`laid_out`  point names that never overlap (after layout);
* :func:`model_label`    a model's readable name for titles (not a site-packages path);
* :func:`save_figure`    the one atomic writer.
"""

from attnscope._exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".base": ["axes_for", "color_scale", "drop_overlapping", "figure_for", "integer_ticks", "laid_out", "model_label",
              "new_figure", "save_figure"],
})
