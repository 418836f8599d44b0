"""The fair exactness rule for a low-precision (bf16 / fp16) attention kernel: held to dense SDPA's own error.

A bf16 kernel cannot meet a float32 tolerance: rounding the output and the gradients to bf16 alone moves
them by up to half a bf16 step (0.06 on a value of 22). So both are measured against ONE float32 dense
masked reference computed from the same bf16 inputs: the kernel's largest absolute error, per output and
per gradient (out, dq, dk, dv), must be at most ``factor`` (2) times the largest error of dense
``F.scaled_dot_product_attention`` with the same boolean mask in the same dtype (plus float32's own
rounding of the reference). Used by ``benchmarks/sparse_attention_gpu.py`` before timing, and by the tests.

The pattern must keep a key on every row (dense SDPA gives NaN on a row with none; ``byte-sparse-8h`` has none).
Einstein legend: b batch, h head, L positions, e head dim.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from .attention import dense_attention
from .patterns import Pattern

if TYPE_CHECKING:  # pragma: no cover
    import torch

PARTS = ("out", "dq", "dk", "dv")


def low_precision_errors(fn: Callable[..., "torch.Tensor"], pattern: Pattern, L: int, b: int, e: int,
                         device: "str | torch.device", dtype: "torch.dtype", causal: bool = True,
                         seed: int = 1) -> dict[str, dict[str, float]]:
    """Largest errors against the float32 dense masked reference, per part of :data:`PARTS`:
    ``{"out": {"kernel": .., "sdpa": .., "scale": max |reference|}, "dq": ...}``.

    ``fn(q, k, v)`` is the kernel (q, k, v ``[b, h, L, e]`` in ``dtype`` on ``device``, h = the pattern's heads)."""
    import torch
    import torch.nn.functional as F

    gen = torch.Generator().manual_seed(seed)
    h = pattern.n_heads
    base = [torch.randn(b, h, L, e, generator=gen).to(device=device, dtype=dtype) for _ in range(3)]
    grad = torch.randn(b, h, L, e, generator=gen).to(device=device, dtype=dtype)
    mask = torch.from_numpy(pattern.mask(L, causal)).to(device)  # [h, L, L]

    def run(f: Callable[..., "torch.Tensor"], inputs_dtype: "torch.dtype") -> list["torch.Tensor"]:
        xs = [x.detach().to(inputs_dtype).requires_grad_() for x in base]
        out = f(*xs)
        out.backward(grad.to(inputs_dtype))
        return [out.detach().float(), *(x.grad.float() for x in xs)]

    ref = run(lambda q, k, v: dense_attention(q, k, v, mask)[0], torch.float32)
    sdpa = run(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), dtype)
    mine = run(fn, dtype)
    return {part: {"kernel": (m - r).abs().max().item(), "sdpa": (s - r).abs().max().item(), "scale": r.abs().max().item()}
            for part, r, s, m in zip(PARTS, ref, sdpa, mine)}


def failures(errors: dict[str, dict[str, float]], factor: float = 2.0) -> list[str]:
    """The parts whose kernel error exceeds ``factor`` x dense SDPA's (plus float32 rounding), one line each."""
    import torch

    eps = torch.finfo(torch.float32).eps
    out = []
    for part, err in errors.items():
        allowed = factor * err["sdpa"] + 64 * eps * err["scale"]
        if not err["kernel"] <= allowed:  # NaN fails too
            out.append(f"{part}: error {err['kernel']:.3g} > {factor:g} x dense SDPA's {err['sdpa']:.3g}")
    return out


def summary(errors: dict[str, dict[str, float]]) -> str:
    """``out 0.0039 (SDPA 0.0039), dq ...``: the kernel's largest errors next to dense SDPA's."""
    return ", ".join(f"{part} {err['kernel']:.2g} (SDPA {err['sdpa']:.2g})" for part, err in errors.items())
