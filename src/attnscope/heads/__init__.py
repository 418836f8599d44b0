"""Head anatomy: attention maps from a model, per-head metrics, clustering, pattern derivation.

* :mod:`.metrics` -- pure functions on maps [b, h, L, L] (:func:`head_metrics`, :func:`window_metrics`)
* :mod:`.maps`    -- streaming maps out of Hugging Face models (eager attention) and attnscope
  checkpoints (``attn_callback``), metrics accumulated per (layer, head): :func:`extract`
* :mod:`.cluster` -- z-scored features, Ward / k-means, silhouette per k, JS-distance MDS
* :mod:`.derive`  -- a sparse pattern per head proposed from its metrics
"""

from attnscope._exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".metrics": ["METRICS", "PROFILE_METRICS", "head_metrics", "window_metrics", "pairwise_js"],
    ".maps": ["MapModel", "HeadsResult", "extract", "open_model"],
    ".cluster": ["ClusterResult", "cluster_heads", "cluster_profiles", "embed_js"],
    ".derive": ["derive_pattern"],
    ".study": ["run_study"],
})
