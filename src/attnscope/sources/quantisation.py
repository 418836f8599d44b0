"""How far to trust a quantised file: simulated quantisation of float weights and the measured error bands.

:class:`QuantisedSource` wraps any source and hands out its 2-D float tensors quantised and
dequantised with the ``gguf`` package's own quantisers, or for Q6_K with :func:`q6_k` (llama.cpp's
reference quantiser, checked against the gguf package's dequantiser), blocks along the input dim as in
GGUF files,, so the scores of a quantised model can be compared with the float ones
(``benchmarks/quantisation_error.py``). :data:`ERROR_BANDS` holds what that benchmark measured on
real float weights (all-MiniLM-L6-v2, Whisper tiny.en, Whisper base): the largest per-layer |delta s| and
|delta d|.
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

#: simulated types: the gguf package's own quantisers, plus Q6_K written here after llama.cpp's reference
#: quantiser (the gguf package only dequantises K-quants; Q4_K is not simulated)
QUANT_TYPES = ("Q8_0", "Q6_K", "Q5_1", "Q5_0", "Q4_1", "Q4_0")
#: values per quantisation block (a row's length must be a multiple)
BLOCK_SIZE = {"Q6_K": 256}

#: qtype -> (max |delta s|, max |delta d|) per layer vs float, over every layer and stack of
#: all-MiniLM-L6-v2, Whisper tiny.en and Whisper base (Q6_K: Whisper base only; benchmarks/quantisation_error.py)
ERROR_BANDS: dict[str, tuple[float, float]] = {
    "Q8_0": (0.0001, 0.0009),
    "Q6_K": (0.0004, 0.0042),
    "Q5_1": (0.0013, 0.0079),
    "Q5_0": (0.0018, 0.0111),
    "Q4_1": (0.0055, 0.0143),
    "Q4_0": (0.0086, 0.0232),
}



def block_size(qtype: str) -> int:
    return BLOCK_SIZE.get(qtype, 32)


def fake_quantise(array: np.ndarray, qtype: str) -> np.ndarray:
    """``array`` [..., n] (n a multiple of the type's block size) quantised to ``qtype`` and back, float32."""
    from gguf import GGMLQuantizationType
    from gguf.quants import dequantize, quantize

    if qtype not in QUANT_TYPES:
        raise UnsupportedError(f"cannot simulate {qtype}; attnscope simulates {', '.join(QUANT_TYPES)}")
    a = np.ascontiguousarray(array, dtype=np.float32)
    if a.shape[-1] % block_size(qtype):
        raise UnsupportedError(f"{qtype} needs rows of a multiple of {block_size(qtype)} values, not {a.shape[-1]}")
    if qtype == "Q6_K":
        return q6_k(a.reshape(-1, 256))[0].reshape(a.shape)
    qt = GGMLQuantizationType[qtype]
    return dequantize(quantize(a, qt), qt).reshape(a.shape).astype(np.float32)


def _make_qx_quants(x: np.ndarray, nmax: int) -> np.ndarray:
    """llama.cpp's ``make_qx_quants(n, nmax, x, L, rmse_type=1)`` on every row of ``x`` [m, n]: the scale
    of each row (x^2-weighted least squares over 19 trial inverse scales)."""
    ax = np.abs(x)
    mx = x[np.arange(len(x)), ax.argmax(axis=1)]
    zero = ax.max(axis=1) < 1e-15
    safe = np.where(zero, 1.0, mx)
    w = x * x

    def trial(iscale: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        lv = np.clip(np.rint(iscale[:, None] * x), -nmax, nmax - 1)  # rint: nearest_int rounds half to even
        return (w * x * lv).sum(axis=1), (w * lv * lv).sum(axis=1)

    sumlx, suml2 = trial(-nmax / safe)
    scale = np.where(suml2 > 0, sumlx / np.where(suml2 > 0, suml2, 1), 0.0)
    best = scale * sumlx
    for step in (*range(-9, 0), *range(1, 10)):
        sx, s2 = trial(-(nmax + 0.1 * step) / safe)
        better = (s2 > 0) & (sx * sx > best * s2)
        scale = np.where(better, sx / np.where(s2 > 0, s2, 1), scale)
        best = np.where(better, scale * sx, best)
    return np.where(zero, 0.0, scale).astype(np.float32)


def q6_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q6_K after llama.cpp's ``quantize_row_q6_K_ref``: blocks of 256 = 16 sub-blocks of 16 values, 6-bit
    quants, int8 sub-scales and one fp16 scale. ``x`` [nb, 256] -> (dequantised [nb, 256], blocks [nb, 210]
    in the GGUF byte layout ql | qh | scales | d, so the gguf package's dequantiser can check it)."""
    nb = len(x)
    scales = _make_qx_quants(x.reshape(-1, 16).astype(np.float64), 32).reshape(nb, 16)
    max_scale = scales[np.arange(nb), np.abs(scales).argmax(axis=1)]
    zero = max_scale == 0
    iscale = np.where(zero, 0.0, -128.0 / np.where(zero, 1.0, max_scale)).astype(np.float32)
    d = np.where(zero, 0.0, 1.0 / np.where(zero, 1.0, iscale)).astype(np.float16)
    sc = np.minimum(127, np.rint(iscale[:, None] * scales)).astype(np.int8)
    deff = (d.astype(np.float32)[:, None] * sc.astype(np.float32))[:, :, None]  # [nb, 16, 1]
    nz = deff != 0
    lv = np.where(nz, np.clip(np.rint(x.reshape(nb, 16, 16) / np.where(nz, deff, 1)), -32, 31), 0)
    xhat = (deff * lv).reshape(nb, 256).astype(np.float32)
    q = (lv.reshape(nb, 256) + 32).astype(np.uint8)
    ql, qh = np.zeros((nb, 128), np.uint8), np.zeros((nb, 64), np.uint8)
    for half in range(2):
        q1, q2, q3, q4 = (q[:, 128 * half + o : 128 * half + o + 32] for o in (0, 32, 64, 96))
        ql[:, 64 * half : 64 * half + 32] = (q1 & 0xF) | ((q3 & 0xF) << 4)
        ql[:, 64 * half + 32 : 64 * half + 64] = (q2 & 0xF) | ((q4 & 0xF) << 4)
        qh[:, 32 * half : 32 * half + 32] = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
    packed = np.concatenate([ql, qh, sc.view(np.uint8), d.reshape(nb, 1).view(np.uint8)], axis=1)
    return xhat, packed


class QuantisedSource(WeightSource):
    """Another source's tensors, 2-D float ones (rows a multiple of the block size) quantised to ``qtype`` on read."""

    def __init__(self, inner: WeightSource, qtype: str) -> None:
        if qtype not in QUANT_TYPES:
            raise UnsupportedError(f"cannot simulate {qtype}; attnscope simulates {', '.join(QUANT_TYPES)}")
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
        if t.ndim != 2 or not torch.is_floating_point(t) or t.shape[-1] % block_size(self.qtype):
            return t  # biases, norms, and rows llama.cpp would not quantise to this type either
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
