"""Head anatomy: attention maps from a model, per-head metrics, clustering, pattern derivation.

* :mod:`.metrics` -- pure functions on maps [b, h, L, L] (:func:`head_metrics`, :func:`window_metrics`)
* :mod:`.maps`    -- streaming maps out of Hugging Face models (eager attention) and attnscope
  checkpoints (``attn_callback``), metrics accumulated per (layer, head): :func:`extract`
* :mod:`.cluster` -- z-scored features, Ward / k-means, silhouette per k, JS-distance MDS
* :mod:`.derive`  -- a sparse pattern per head proposed from its metrics
"""

from __future__ import annotations

from .metrics import METRICS, PROFILE_METRICS, head_metrics, window_metrics

__all__ = ["METRICS", "PROFILE_METRICS", "head_metrics", "window_metrics", "extract", "cluster_heads", "derive_pattern"]


def __getattr__(name: str):
    if name == "extract":
        from .maps import extract

        return extract
    if name == "cluster_heads":
        from .cluster import cluster_heads

        return cluster_heads
    if name == "derive_pattern":
        from .derive import derive_pattern

        return derive_pattern
    raise AttributeError(name)
