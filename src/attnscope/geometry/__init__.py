"""Geometry of the query-key bilinear form W_qk = W_q W_k^T: symmetry and directionality.

``score(source)`` reads a model's q/k weights layer by layer and returns a tidy table of score
records (per head and per layer); ``score_factors`` scores one layer's factors (used by the
trainer); ``summarize`` gives the paper's per-model medians and IQRs. The math lives in
:mod:`attnscope.geometry.kernels` (factored statistics plus explicit slow references).
Position-aware geometry of rotary models: ``score(source, offsets=[...])`` scores the form applied
between a query and a key ``offset`` positions apart (:mod:`attnscope.geometry.rotary`), and
``frequencies(source)`` the W_qk energy per rotary pair (:mod:`attnscope.geometry.offsets`).
"""

from __future__ import annotations

from attnscope.errors import InputError

from attnscope._exports import lazy_exports

__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    ".score": ["LEVELS", "RECORD_COLUMNS", "NonFiniteWeightsWarning", "records_frame", "score", "score_factors",
               "summarize"],
    ".offsets": ["PositionNote", "check_offsets", "frequencies", "parse_offsets"],
    ".kernels": ["directionality", "directionality_ref", "head_stats", "layer_matrix", "layer_stats", "symmetry",
                 "symmetry_ref"],
})
__all__ += ["wqk_block"]


def wqk_block(source, layer: int = 0, *, stack: str | None = None, n: int = 50):  # noqa: ANN001, ANN201
    """The explicit layer form M_L[:n, :n] (float32 numpy) of one layer: the paper's example heatmap."""
    from attnscope.families import get_family
    from attnscope.sources import open_source

    src = open_source(source)
    try:
        fam = get_family(src.config)
        infos = [i for i in fam.stacks(src.config, src) if stack is None or i.stack == stack]
        if not infos:
            raise InputError(f"{src.name}: no {stack} stack")
        info = infos[0]
        if not 0 <= layer < info.n_layers:
            raise InputError(f"{src.name}: layer {layer} out of range (the {info.stack} stack has {info.n_layers})")
        f = fam.layer_factors(src, info, layer)
        from .kernels import layer_matrix

        return layer_matrix(f.q, f.k, n, n)
    finally:
        if src is not source:
            src.close()
