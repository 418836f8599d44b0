"""Family spec for attnscope's own trained models (``model_type: "attnscope"``).

Einstein legend: h query head, g kv head, d model dim, e head dim.

Checkpoints written by :mod:`attnscope.training` hold ``blocks.{i}.attn.q_proj.weight`` [h*e, d] and
``blocks.{i}.attn.k_proj.weight`` [g*e, d] (``nn.Linear``, rows ``(n e)``); the one stack is
``decoder`` when the model is causal and ``encoder`` otherwise. Head counts come from the
checkpoint's config (``n_layers``, ``n_heads``, ``n_kv_heads``, ``d_model``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from attnscope.errors import FormatError

from .base import AttentionFactors, FamilySpec, StackInfo

if TYPE_CHECKING:  # pragma: no cover
    from attnscope.sources.base import WeightSource


class AttnscopeSpec(FamilySpec):
    """attnscope.training.model.Transformer checkpoints (encoder or decoder, MHA or GQA)."""

    name = "attnscope"
    model_types = ("attnscope",)

    def stacks(self, config: dict[str, Any], source: "WeightSource | None" = None) -> list[StackInfo]:
        try:
            h = int(config["n_heads"])
            g = int(config.get("n_kv_heads") or h)
            d = int(config["d_model"])
            n_layers = int(config["n_layers"])
        except (KeyError, TypeError, ValueError) as exc:
            raise FormatError(f"attnscope config lacks a head-count field ({exc})") from None
        stack = "decoder" if config.get("causal") else "encoder"
        return [StackInfo(stack, n_layers, h, g, d, d // h)]

    def layer_factors(self, source: "WeightSource", info: StackInfo, layer: int) -> AttentionFactors:
        h, g, d, e = info.n_heads, info.n_kv_heads, info.d_model, info.d_head
        q = _heads(source, f"blocks.{layer}.attn.q_proj.weight", h, e, d)
        k = _heads(source, f"blocks.{layer}.attn.k_proj.weight", g, e, d)
        return AttentionFactors(info.stack, layer, q, k)


def _heads(source: "WeightSource", name: str, n: int, e: int, d: int) -> np.ndarray:
    """nn.Linear weight [n*e, d] -> input-by-output factors [n, d, e] float32."""
    w = source.get(name).float().numpy()
    if w.shape != (n * e, d):
        raise FormatError(f"{source.name}: {name} has shape {tuple(w.shape)}, expected {(n * e, d)}")
    return np.ascontiguousarray(w.reshape(n, e, d).transpose(0, 2, 1))


SPECS = [AttnscopeSpec()]
