"""The atlas: every head's W_qk geometry (symmetry s, directionality d) beside what the head does.

* :mod:`.build` -- :func:`atlas` (one model: tidy per-head table, correlations across heads)
* :mod:`.stats` -- Spearman's rho with a percentile bootstrap 95% interval over heads
* :mod:`.zoo`   -- every model of a zoo group through the results store (resumable), pooled

Figures live in :mod:`attnscope.plots.atlas`; the HTML section in :mod:`attnscope.report`.
"""

from attnscope._exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".build": ["AtlasResult", "atlas", "behaviour_columns", "GEOMETRY", "BEHAVIOUR_METRICS"],
    ".stats": ["spearman", "spearman_ci", "correlation_table"],
})


class _CallableRoom(__import__("types").ModuleType):
    """``attnscope.atlas(model_or_source, ...)`` calls :func:`attnscope.atlas.build.atlas`."""

    def __call__(self, *args, **kwargs):  # noqa: ANN002, ANN003, ANN204
        from .build import atlas

        return atlas(*args, **kwargs)


__import__("sys").modules[__name__].__class__ = _CallableRoom
