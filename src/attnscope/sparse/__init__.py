"""Sparse attention: per-head pattern specs and a kernel whose cost follows the pattern's density.

* :mod:`attnscope.sparse.patterns` -- what a head may attend to (local window, stride, anchors,
  their unions; presets such as ``"byte-sparse-8h"``), and the dense boolean mask (True = may attend).
* :mod:`attnscope.sparse.attention` -- :func:`sparse_attention`, exact (to float tolerance) against
  the dense masked reference, forward and backward.

This room is used by the training model, so it never imports :mod:`attnscope.training`.
"""

from __future__ import annotations

from .patterns import HeadPattern, Pattern, dense_mask, load_pattern, preset_names

__all__ = ["HeadPattern", "Pattern", "dense_mask", "load_pattern", "preset_names", "sparse_attention"]


def __getattr__(name: str):
    if name == "sparse_attention":
        from .attention import sparse_attention

        return sparse_attention
    raise AttributeError(name)
