"""How far to trust a quantised file: simulated quantisation of float weights and the measured error bands.

:class:`QuantisedSource` wraps any source and hands out its 2-D float tensors quantised and
dequantised with the ``gguf`` package's own quantisers, or for the K-quants with :func:`q6_k` /
:func:`q4_k` (ports of llama.cpp's reference quantisers, checked against the gguf package's dequantiser), blocks along the input dim as in
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

#: simulated types: the gguf package's own quantisers, plus Q6_K and Q4_K ported here from llama.cpp's
#: reference quantisers (the gguf package only dequantises K-quants)
QUANT_TYPES = ("Q8_0", "Q6_K", "Q5_1", "Q5_0", "Q4_K", "Q4_1", "Q4_0")
#: values per quantisation block (a row's length must be a multiple)
BLOCK_SIZE = {"Q6_K": 256, "Q4_K": 256}

#: qtype -> (max |delta s|, max |delta d|) per layer vs float, over every layer and stack of
#: all-MiniLM-L6-v2, Whisper tiny.en and Whisper base (K-quants: Whisper base only; benchmarks/quantisation_error.py)
ERROR_BANDS: dict[str, tuple[float, float]] = {
    "Q8_0": (0.0001, 0.0009),
    "Q6_K": (0.0004, 0.0042),
    "Q5_1": (0.0013, 0.0079),
    "Q5_0": (0.0018, 0.0111),
    "Q4_K": (0.0051, 0.0141),
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
    if qtype in ("Q6_K", "Q4_K"):
        return (q6_k if qtype == "Q6_K" else q4_k)(a.reshape(-1, 256))[0].reshape(a.shape)
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



def _make_qkx2_quants(x: np.ndarray, w: np.ndarray, nmax: int, nstep: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """llama.cpp's ``make_qkx2_quants(n, nmax, x, w, L, &min, Laux, -1, 0.1, nstep, false)`` on every row of
    ``x`` [m, n]: a scale and a (subtracted) min per row, by weighted least squares over trial scales."""
    mn = np.minimum(x.min(axis=1), 0.0)
    flat = x.max(axis=1) == mn
    rng = np.where(flat, 1.0, x.max(axis=1) - mn)
    sum_w, sum_x = w.sum(axis=1), (w * x).sum(axis=1)
    scale = rng / nmax
    lv = np.clip(np.rint((x - mn[:, None]) / scale[:, None]), 0, nmax)
    best = (w * (scale[:, None] * lv + mn[:, None] - x) ** 2).sum(axis=1)
    for step in range(nstep + 1):
        la = np.clip(np.rint(((-1.0 + 0.1 * step + nmax) / rng)[:, None] * (x - mn[:, None])), 0, nmax)
        sl, sl2, sxl = (w * la).sum(axis=1), (w * la * la).sum(axis=1), (w * la * x).sum(axis=1)
        det = sum_w * sl2 - sl * sl
        ok = det > 0
        det = np.where(ok, det, 1)
        ts, tm = (sum_w * sxl - sum_x * sl) / det, (sl2 * sum_x - sl * sxl) / det
        pos = tm > 0  # a positive min is clamped to 0 and the scale refitted
        ts = np.where(pos, sxl / np.where(sl2 > 0, sl2, 1), ts)
        tm = np.where(pos, 0.0, tm)
        better = ok & ((w * (ts[:, None] * la + tm[:, None] - x) ** 2).sum(axis=1) < best)
        best = np.where(better, (w * (ts[:, None] * la + tm[:, None] - x) ** 2).sum(axis=1), best)
        scale, mn = np.where(better, ts, scale), np.where(better, tm, mn)
    return np.where(flat, 0.0, scale), -mn


def q4_k(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K after llama.cpp's ``quantize_row_q4_K_ref``: blocks of 256 = 8 sub-blocks of 32 values, 4-bit
    quants with a 6-bit scale and min per sub-block, fp16 d and dmin. ``x`` [nb, 256] -> (dequantised
    [nb, 256], blocks [nb, 144] in the GGUF byte layout d | dmin | scales[12] | qs[128])."""
    nb = len(x)
    xs = x.reshape(nb * 8, 32).astype(np.float64)
    w = np.sqrt((xs * xs).mean(axis=1))[:, None] + np.abs(xs)
    scales, mins = (a.reshape(nb, 8).astype(np.float32) for a in _make_qkx2_quants(xs, w, 15))
    max_s, max_m = scales.max(axis=1), mins.max(axis=1)
    inv_s = np.where(max_s > 0, 63 / np.where(max_s > 0, max_s, 1), 0).astype(np.float32)
    inv_m = np.where(max_m > 0, 63 / np.where(max_m > 0, max_m, 1), 0).astype(np.float32)
    ls = np.minimum(63, np.rint(inv_s[:, None] * scales)).astype(np.uint8)
    lm = np.minimum(63, np.rint(inv_m[:, None] * mins)).astype(np.uint8)
    d, dmin = (max_s / 63).astype(np.float16), (max_m / 63).astype(np.float16)
    sc = np.zeros((nb, 12), np.uint8)  # 6-bit scales and mins, the upper four of each split over spare bits
    sc[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    sc[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    sc[:, 8:12] = (ls[:, 4:8] & 0xF) | ((lm[:, 4:8] & 0xF) << 4)
    d1 = (d.astype(np.float32)[:, None] * ls)[:, :, None]  # [nb, 8, 1]
    dm = (dmin.astype(np.float32)[:, None] * lm)[:, :, None]
    nz = d1 != 0
    lv = np.where(nz, np.clip(np.rint((x.reshape(nb, 8, 32) + dm) / np.where(nz, d1, 1)), 0, 15), 0)
    xhat = (d1 * lv - dm).reshape(nb, 256).astype(np.float32)
    q = lv.reshape(nb, 4, 2, 32).astype(np.uint8)  # 64-value chunks: low nibbles the first 32, high the next
    qs = (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(nb, 128)
    packed = np.concatenate([d.reshape(nb, 1).view(np.uint8), dmin.reshape(nb, 1).view(np.uint8), sc, qs], axis=1)
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
