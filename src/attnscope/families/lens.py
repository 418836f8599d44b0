"""Family spec of TransformerLens-style objects (an internal ``model_type``, set by
:mod:`attnscope.sources.loaded`, never written by users).

Einstein legend: h query head, g kv head, d model dim, e head dim.

Such objects already hold W_Q ``[h, d, e]`` and W_K ``[g, d, e]`` per layer in attnscope's own
input-by-output orientation (``q = x @ W_Q[h]``), so the layout is the identity. The one stack is
``decoder``: TransformerLens wraps causal language models.
"""

from __future__ import annotations

from .declarative import DeclarativeSpec, Proj, Stack

_IDENTITY = "h d e -> h d e"

SPECS = [
    DeclarativeSpec(
        "transformer_lens",
        ("lens:transformer_lens",),
        (Stack("decoder", Proj("blocks.{i}.attn.W_Q", _IDENTITY), Proj("blocks.{i}.attn.W_K", _IDENTITY),
               n_layers=("n_layers",), n_heads=("n_heads",), d_model=("d_model",),
               n_kv_heads=("n_key_value_heads",), d_head=("d_head",)),),
        note="TransformerLens-style objects in memory: W_Q / W_K [layer, head, d_model, d_head]",
    )
]
