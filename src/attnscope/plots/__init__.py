"""Figures: matplotlib, one module per area (geometry, survey, training, heads, dynamics), one function
per figure. Drawn without pyplot and without choosing a backend, so they work without a screen, hold no
global state, leave the user's pyplot alone, and show inline in Jupyter (:mod:`attnscope.plots.figure`).

The one convention (as scikit-learn's displays and seaborn): a figure function takes data (tidy tables or
arrays), an optional ``ax`` (single-panel figures) or ``fig`` (multi-panel figures) to draw into, and
returns the matplotlib Figure. No figure function writes a file; the caller saves it with
:func:`save_figure` (atomic). The helpers every module shares (in :mod:`attnscope.plots.base`, exported here):

* :func:`new_figure` / :func:`axes_for` / :func:`figure_for`  a Figure (or the caller's) to draw on;
* :func:`integer_ticks`  integer-only ticks on an axis of layer or head indices;
* :func:`model_label`    a model's readable name for titles (not a site-packages path);
* :func:`save_figure`    the one atomic writer.
"""

from attnscope._exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".base": ["axes_for", "figure_for", "integer_ticks", "model_label", "new_figure", "save_figure"],
})
