"""How far to trust a quantised file: simulated quantisation of float weights and the measured error bands.

:class:`QuantisedSource` wraps any source and hands out its 2-D float tensors quantised and
dequantised with the ``gguf`` package's own quantisers (llama.cpp's block formats, blocks along the
input dim as in GGUF files), so the scores of a quantised model can be compared with the float ones
(``benchmarks/quantisation_error.py``). :data:`ERROR_BANDS` holds what that benchmark measured on
real float weights (all-MiniLM-L6-v2, Whisper tiny.en): the largest per-layer |delta s| and |delta d|.
:func:`qk_quantisation` reads the q/k tensor types of a GGUF file, so ``attnscope geometry`` can say
which band applies.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import numpy as np

from attnscope.errors import InputError, UnsupportedError

from .base import WeightSource

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: the types the gguf package can quantise (its K-quant quantisers, Q4_K / Q6_K, are not implemented)
QUANT_TYPES = ("Q8_0", "Q5_1", "Q5_0", "Q4_1", "Q4_0")

#: qtype -> (max |delta s|, max |delta d|) per layer vs float, over every layer and stack of
#: all-MiniLM-L6-v2 and Whisper tiny.en (benchmarks/quantisation_error.py; docs/zoo.md)
ERROR_BANDS: dict[str, tuple[float, float]] = {
    "Q8_0": (0.0001, 0.0009),
    "Q5_1": (0.0013, 0.0037),
    "Q5_0": (0.0016, 0.0111),
    "Q4_1": (0.0050, 0.0141),
    "Q4_0": (0.0057, 0.0232),
}



def fake_quantise(array: np.ndarray, qtype: str) -> np.ndarray:
    """``array`` [..., n] (n a multiple of 32) quantised to ``qtype`` and back, float32."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    if qtype not in QUANT_TYPES:
        raise UnsupportedError(f"cannot simulate {qtype}; the gguf package quantises {', '.join(QUANT_TYPES)}")
    qt = GGMLQuantizationType[qtype]
    a = np.ascontiguousarray(array, dtype=np.float32)
    return dequantize(quantize(a, qt), qt).reshape(a.shape).astype(np.float32)


class QuantisedSource(WeightSource):
    """Another source's tensors, 2-D float ones (last dim a multiple of 32) quantised to ``qtype`` on read."""

    def __init__(self, inner: WeightSource, qtype: str) -> None:
        if qtype not in QUANT_TYPES:
            raise UnsupportedError(f"cannot simulate {qtype}; the gguf package quantises {', '.join(QUANT_TYPES)}")
        self.inner = inner
        self.qtype = qtype
        self.name = f"{inner.name} [{qtype}]"

    @classmethod
    def detect(cls, spec: str) -> bool:
        return False

    @classmethod
    def open(cls, spec: str, **options: Any) -> "QuantisedSource":
        raise InputError(f"{spec}: a quantised view wraps an open source, it is not opened from a path")

    @property
    def config(self) -> dict[str, Any]:
        return self.inner.config

    def keys(self) -> list[str]:
        return self.inner.keys()

    def has(self, name: str) -> bool:
        return self.inner.has(name)

    def get(self, name: str) -> "torch.Tensor":
        import torch

        t = self.inner.get(name)
        if t.ndim != 2 or not torch.is_floating_point(t) or t.shape[-1] % 32:
            return t
        return torch.from_numpy(fake_quantise(t.float().numpy(), self.qtype))

    def close(self) -> None:
        self.inner.close()


_QK_NAME = re.compile(r"\.attn_(q|k|qkv)\.weight$")


def qk_quantisation(source: WeightSource) -> list[str]:
    """The distinct storage types of a GGUF source's q/k (or fused qkv) tensors; [] for other sources."""
    tensor_type = getattr(source, "tensor_type", None)
    if tensor_type is None:
        return []
    return sorted({str(tensor_type(n)) for n in source.keys() if _QK_NAME.search(n)})


def band_line(types: list[str]) -> str | None:
    """One line for ``attnscope geometry``: the q/k quantisation and the measured error band, or None (float)."""
    quant = [t for t in types if t not in ("F32", "F16", "BF16")]
    if not quant:
        return None
    bands = [ERROR_BANDS[t] for t in quant if t in ERROR_BANDS]
    unknown = [t for t in quant if t not in ERROR_BANDS]
    text = f"q/k weights quantised as {', '.join(quant)}"
    if bands:
        ds, dd = max(b[0] for b in bands), max(b[1] for b in bands)
        text += f"; measured error vs float per layer: |delta s| <= {ds:.3f}, |delta d| <= {dd:.3f}"
    if unknown:
        text += f"; no measured band for {', '.join(unknown)} (docs/zoo.md lists the measured types)"
    return text
