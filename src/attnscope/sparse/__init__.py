"""Sparse attention: per-head pattern specs and a kernel whose cost follows the pattern's density.

* :mod:`attnscope.sparse.patterns` -- what a head may attend to (local window, stride, anchors,
  their unions; presets such as ``"byte-sparse-8h"``), and the dense boolean mask (True = may attend).
* :mod:`attnscope.sparse.attention` -- :func:`sparse_attention`, exact (to float tolerance) against
  the dense masked reference, forward and backward.

This room is used by the training model, so it never imports :mod:`attnscope.training`.
"""

from attnscope._exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".patterns": ["HeadPattern", "Pattern", "dense_mask", "load_pattern", "preset_names"],
    ".attention": ["sparse_attention", "dense_attention"],
    ".flex": ["flex_sparse_attention"],
})
