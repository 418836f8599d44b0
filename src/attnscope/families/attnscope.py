"""Family spec for attnscope's own trained models (``model_type: "attnscope"``).

Einstein legend: h query head, g kv head, d model dim, e head dim.

Checkpoints written by :mod:`attnscope.training` hold ``blocks.{i}.attn.q_proj.weight`` [h*e, d] and
``blocks.{i}.attn.k_proj.weight`` [g*e, d] (``nn.Linear``, rows ``(h e)``). The tensors are the same
for both kinds of model; the one stack is ``decoder`` when the config says ``causal`` and
``encoder`` otherwise. Declared with the generic mechanism of :mod:`.declarative`; only the choice
of stack from the config is code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .base import StackInfo
from .declarative import DeclarativeSpec, Stack, separate

if TYPE_CHECKING:  # pragma: no cover
    from attnscope.sources.base import WeightSource

_QK = separate("blocks.{i}.attn.q_proj.weight", "blocks.{i}.attn.k_proj.weight")
_SIZES = dict(n_layers=("n_layers",), n_heads=("n_heads",), d_model=("d_model",), n_kv_heads=("n_kv_heads",))


@dataclass(frozen=True)
class AttnscopeSpec(DeclarativeSpec):
    """Encoder (bidirectional) or decoder (causal) by ``config['causal']``; MHA or GQA."""

    def stacks(self, config: dict[str, Any], source: "WeightSource | None" = None) -> list[StackInfo]:
        want = "decoder" if config.get("causal") else "encoder"
        return [self.stack_info(config, self._stack(want))]


SPECS = [
    AttnscopeSpec(
        "attnscope",
        ("attnscope",),
        (Stack("encoder", *_QK, **_SIZES), Stack("decoder", *_QK, **_SIZES)),
        note="models trained by attnscope train (stack from config 'causal')",
    )
]
