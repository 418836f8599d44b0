"""Sparse patterns as FlexAttention ``mask_mod`` functions: the CUDA path of :func:`sparse_attention`.

A :class:`~attnscope.sparse.patterns.Pattern` becomes arithmetic on indices, never an L x L tensor:
per head h, a window ``w[h]`` (-1 = no band, L = dense) and a boolean row ``shared[h, j]`` (the
stride / anchor / position keys, the same for every query). Query i may attend key j when

    (abs(i - j) <= w[h]  or  shared[h, j])  and  (j <= i  if causal)

which is exactly :meth:`HeadPattern.allowed` (tested on CPU against the dense mask). The block mask
is built with ``create_block_mask(..., _compile=True)`` on CUDA, so only block-level summaries are
materialised and FlexAttention skips the blocks with no kept entry: its cost follows the density.

Einstein legend: b batch, h head, i/j query/key positions (L of them), e head dim.

FlexAttention has no CPU backward in torch 2.13: on CPU this path serves inference and tests only;
training on CPU uses the gathered kernel of :mod:`attnscope.sparse.attention`. Rows with no allowed
key give the zero vector, as in the other paths.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable

from attnscope.errors import ConfigError

from .patterns import Pattern

if TYPE_CHECKING:  # pragma: no cover
    import torch


def available() -> bool:
    """True when this torch has FlexAttention (torch >= 2.5)."""
    try:
        from torch.nn.attention import flex_attention  # noqa: F401
    except ImportError:
        return False
    return True


def pattern_tables(pattern: Pattern, L: int, device: "str | torch.device" = "cpu") -> tuple["torch.Tensor", "torch.Tensor"]:
    """Per-head window ``[h]`` (int64; -1 = none, L = dense) and shared-key rows ``[h, L]`` (bool)."""
    import torch

    h = pattern.n_heads
    window = torch.full((h,), -1, dtype=torch.int64)
    shared = torch.zeros(h, L, dtype=torch.bool)
    for i, hp in enumerate(pattern.heads):
        if hp.dense:
            window[i] = L
            continue
        if hp.window is not None:
            window[i] = int(hp.window)
        keys = torch.from_numpy(hp.shared_keys(L))
        if len(keys):
            shared[i, keys] = True
    return window.to(device), shared.to(device)


def mask_mod(pattern: Pattern, L: int, causal: bool, device: "str | torch.device" = "cpu") -> Callable[..., Any]:
    """The FlexAttention ``mask_mod(b, h, i, j) -> bool`` of ``pattern`` at length L (True = may attend)."""
    window, shared = pattern_tables(pattern, L, device)

    def allowed(b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202 - FlexAttention's signature
        keep = ((q_idx - kv_idx).abs() <= window[h]) | shared[h, kv_idx]
        if causal:
            keep = keep & (kv_idx <= q_idx)
        return keep

    return allowed


@lru_cache(maxsize=32)
def block_mask(pattern: Pattern, L: int, causal: bool, device: str) -> Any:
    """The (cached) FlexAttention BlockMask of ``pattern``; compiled construction on CUDA (no L x L tensor)."""
    import torch
    from torch.nn.attention.flex_attention import create_block_mask

    with torch.inference_mode(False):  # cached: must stay usable outside inference mode (see attention.py)
        fn = mask_mod(pattern, L, causal, device)
        return create_block_mask(fn, B=None, H=pattern.n_heads, Q_LEN=L, KV_LEN=L, device=device,
                                 _compile=device.startswith("cuda"))


@lru_cache(maxsize=1)
def _compiled_flex() -> Callable[..., Any]:
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False)


def flex_sparse_attention(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", pattern: Pattern,
                          causal: bool, scale: float) -> "torch.Tensor":
    """q,k,v [b,h,L,e] -> out [b,h,L,e] through FlexAttention with the pattern's block mask."""
    import torch

    if not available():
        raise ConfigError("impl='flex' needs torch >= 2.5 (torch.nn.attention.flex_attention)")
    b, h, L, e = q.shape
    if pattern.n_heads != h:
        raise ConfigError(f"the pattern has {pattern.n_heads} heads, the input {h}")
    if q.device.type == "cpu" and torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        raise ConfigError("FlexAttention has no backward on CPU: use impl='gather' (the default there) to train")
    bm = block_mask(pattern, L, causal, str(q.device))
    if q.device.type == "cuda":
        return _compiled_flex()(q, k, v, block_mask=bm, scale=scale)
    import warnings

    from torch.nn.attention.flex_attention import flex_attention

    with warnings.catch_warnings():  # eager CPU flex materialises scores: fine for inference and tests
        warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
        return flex_attention(q, k, v, block_mask=bm, scale=scale)
