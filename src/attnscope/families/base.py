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

from attnscope.errors import ConfigError, FormatError

if TYPE_CHECKING:  # pragma: no cover
    from attnscope.sources.base import WeightSource

STACKS = ("encoder", "decoder", "cross")
#: norm-gain folding: "none" (the paper's convention), "qk" (q/k-norm gains), "all" (also the input-norm gain)
FOLDS = ("none", "qk", "all")


def check_fold(fold: "bool | str | None") -> str:
    """``fold_norms`` as one of :data:`FOLDS` (True = "qk", False/None = "none"); else one ConfigError."""
    if fold is None or fold is False:
        return "none"
    if fold is True:
        return "qk"
    if fold not in FOLDS:
        raise ConfigError(f"fold_norms must be one of {', '.join(FOLDS)} (or True/False), not {fold!r}", params="fold_norms")
    return str(fold)


def _gain_for(gain: np.ndarray, n: int, e: int, what: str) -> np.ndarray:
    """A q/k-norm gain as ``[n, 1, e]``: one per head dim (shared by heads), per head, or over all n*e outputs."""
    g = np.asarray(gain, dtype=np.float32).reshape(-1)
    if g.size == e:
        return g.reshape(1, 1, e)
    if g.size == n * e:
        return g.reshape(n, 1, e)
    raise FormatError(f"{what} norm gain has {g.size} entries; expected {e} (head dim) or {n * e} (heads x head dim)")


def fold_gains(
    q: np.ndarray, k: np.ndarray, *, q_gain: np.ndarray | None = None, k_gain: np.ndarray | None = None,
    in_gain: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Fold norm gains into per-head factors ``q [h, d, e]``, ``k [g, d, e]`` (new arrays; inputs untouched).

    With the normalisation's scale held fixed, ``x -> (x W) * gamma`` is ``x (W diag(gamma))``, so a
    q/k-norm gain scales the factor's columns (e); the input-norm gain ``gamma_in`` (applied to x before
    both projections of self-attention) scales its rows (d): ``diag(gamma_in) W``.
    """
    if q_gain is not None:
        q = q * _gain_for(q_gain, q.shape[0], q.shape[2], "q")
    if k_gain is not None:
        k = k * _gain_for(k_gain, k.shape[0], k.shape[2], "k")
    if in_gain is not None:
        gi = np.asarray(in_gain, dtype=np.float32).reshape(-1)
        if gi.size != q.shape[1] or gi.size != k.shape[1]:
            raise FormatError(f"input norm gain has {gi.size} entries; the factors' input dim is {q.shape[1]}")
        q = q * gi[None, :, None]
        k = k * gi[None, :, None]
    return np.asarray(q, dtype=np.float32), np.asarray(k, dtype=np.float32)


def check_grouping(n_q: int, n_kv: int) -> None:
    """ConfigError unless ``n_q`` query heads group evenly over ``n_kv`` key/value heads (nothing allocated)."""
    if n_kv <= 0 or n_q <= 0 or n_q % n_kv:
        raise ConfigError(f"{n_q} query heads cannot be grouped over {n_kv} key/value heads")


def kv_head_index(n_q: int, n_kv: int) -> np.ndarray:
    """Key/value head used by each query head: ``g(h) = h // (n_q / n_kv)`` (Hugging Face ``repeat_kv``).

    The ONE place this mapping lives (MHA: identity; GQA: groups of n_q/n_kv; MQA: all zero).
    """
    check_grouping(n_q, n_kv)
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

    def layer_factors(self, source: "WeightSource", info: StackInfo, layer: int, fold: str = "none") -> AttentionFactors:
        """Q and K of one layer; ``fold`` (see :data:`FOLDS`) folds the spec's declared norm gains in."""
        raise NotImplementedError

    def iter_factors(
        self, source: "WeightSource", stacks: tuple[str, ...] | None = None, fold: str = "none"
    ) -> Iterator[AttentionFactors]:
        for info in self.stacks(source.config, source):
            if stacks is not None and info.stack not in stacks:
                continue
            for layer in range(info.n_layers):
                yield self.layer_factors(source, info, layer, fold)
