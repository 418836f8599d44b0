"""What a family spec is, and the one function that maps query heads to key/value heads.

Einstein legend: l layer, h query head, g kv head, d model dim (input), e head dim.

A family spec turns a :class:`~attnscope.sources.base.WeightSource` into per-layer factors
``Q [h, d, e]`` and ``K [g, d, e]`` (input-by-output: ``q = x @ Q[h]``), so that the bilinear form
of query head ``h`` is ``M_h = Q[h] @ K[kv_head_index(h)].T`` with rows = query, columns = key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    from attnscope.sources.base import WeightSource

STACKS = ("encoder", "decoder", "cross")


def kv_head_index(n_q: int, n_kv: int) -> np.ndarray:
    """Key/value head used by each query head: ``g(h) = h // (n_q / n_kv)`` (Hugging Face ``repeat_kv``).

    The ONE place this mapping lives (MHA: identity; GQA: groups of n_q/n_kv; MQA: all zero).
    """
    if n_kv <= 0 or n_q <= 0 or n_q % n_kv:
        from attnscope.errors import ConfigError

        raise ConfigError(f"{n_q} query heads cannot be grouped over {n_kv} key/value heads")
    return np.arange(n_q) // (n_q // n_kv)


@dataclass(frozen=True)
class StackInfo:
    """One attention stack of a model (encoder self-, decoder self- or cross-attention)."""

    stack: str  # "encoder" | "decoder" (causal self-attention) | "cross"
    n_layers: int
    n_heads: int  # query heads
    n_kv_heads: int
    d_model: int  # query-side input dim
    d_head: int
    d_model_kv: int | None = None  # key-side input dim when it differs (cross-attention)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.stack not in STACKS:
            raise ValueError(f"stack must be one of {STACKS}, not {self.stack!r}")


@dataclass(frozen=True)
class AttentionFactors:
    """Per-head W_q and W_k of one layer of one stack."""

    stack: str
    layer: int
    q: np.ndarray  # [h, d, e] float32
    k: np.ndarray  # [g, d_k, e] float32

    @property
    def n_heads(self) -> int:
        return int(self.q.shape[0])

    @property
    def n_kv_heads(self) -> int:
        return int(self.k.shape[0])

    @property
    def kv_index(self) -> np.ndarray:
        return kv_head_index(self.n_heads, self.n_kv_heads)


class FamilySpec:
    """Interface every family implements (declaratively, see the modules in this package)."""

    #: short family name, the ``family`` column of score records
    name: str = ""
    #: config ``model_type`` values (or ``gguf:<arch>`` / ``ct2:<arch>`` keys) this spec handles
    model_types: tuple[str, ...] = ()

    def stacks(self, config: dict[str, Any], source: "WeightSource | None" = None) -> list[StackInfo]:
        raise NotImplementedError

    def layer_factors(self, source: "WeightSource", info: StackInfo, layer: int) -> AttentionFactors:
        raise NotImplementedError

    def iter_factors(
        self, source: "WeightSource", stacks: tuple[str, ...] | None = None
    ) -> Iterator[AttentionFactors]:
        for info in self.stacks(source.config, source):
            if stacks is not None and info.stack not in stacks:
                continue
            for layer in range(info.n_layers):
                yield self.layer_factors(source, info, layer)
