"""Family spec for attnscope's own trained models (``model_type: "attnscope"``).

Einstein legend: h query head, g kv head, d model dim, e head dim.

Checkpoints written by :mod:`attnscope.training` hold ``blocks.{i}.attn.q_proj.weight`` [h*e, d] and
``blocks.{i}.attn.k_proj.weight`` [g*e, d] (``nn.Linear``, rows ``(h e)``). The tensors are the same
for both kinds of model; the one stack is ``decoder`` when the config says ``causal: true`` (a
variant layout) and ``encoder`` otherwise. Pure data, on the generic mechanism of :mod:`.declarative`.
"""

from __future__ import annotations

from .declarative import DeclarativeSpec, Stack, Variant, separate

_QK = separate("blocks.{i}.attn.q_proj.weight", "blocks.{i}.attn.k_proj.weight")
_SIZES = dict(n_layers=("n_layers",), n_heads=("n_heads",), d_model=("d_model",), n_kv_heads=("n_kv_heads",))

SPECS = [
    DeclarativeSpec(
        "attnscope",
        ("attnscope",),
        (Stack("encoder", *_QK, **_SIZES),),
        note="models trained by attnscope train (decoder stack when the config says causal)",
        variants=(Variant((("causal", True),), (Stack("decoder", *_QK, **_SIZES),)),),
    )
]
