"""Family spec of ONNX graphs (an internal ``model_type``, set by :mod:`attnscope.sources.onnxfile`).

Einstein legend: h query head, g kv head, d model dim, e head dim.

The ONNX source has already traced each attention block's projection weights and hands them over
input-by-output, ``[d, (h e)]`` (what an exported ``MatMul`` multiplies activations by), so the layout
is the Conv1D one. One stack: ``encoder``, or ``decoder`` when a config.json beside the file names a
decoder (``causal`` in the source's config).
"""

from __future__ import annotations

from .declarative import CONV1D, DeclarativeSpec, Stack, Variant, separate

_QK = separate("onnx.layers.{i}.q_weight", "onnx.layers.{i}.k_weight", CONV1D)
_SIZES = dict(n_layers=("n_layers",), n_heads=("n_heads",), d_model=("d_model",), n_kv_heads=("n_kv_heads",),
              d_head=("d_head",), d_model_kv=("d_model_kv",))  # fmt: skip

SPECS = [
    DeclarativeSpec(
        "onnx",
        ("onnx:graph",),
        (Stack("encoder", *_QK, **_SIZES),),
        note="ONNX graphs: q/k MatMul weights traced from each Softmax (attnscope.sources.onnxfile)",
        variants=(Variant((("causal", True),), (Stack("decoder", *_QK, **_SIZES),)),),
    )
]
