"""The key layout the block-sparse kernel runs over: a pattern's shared keys packed ahead of the sequence.

Einstein legend: h head, i query position, j key position (L of them), s slot of the key segment (S of
them), n query block, m key block, B block size (128, FlexAttention's), b batch, e head dim.

A head keeps, for query i, a local band ``abs(i - j) <= w[h]`` and a set of keys shared by every query
(strides, anchors, positions). In the sequence's own order the shared keys (every 8th key, say) touch
every key block, so a block-sparse kernel skips almost nothing. :class:`KeyLayout` puts them first; the
key axis becomes ``[S segment slots | L sequence keys]``:

* slot s of head h holds key ``pos[h, s]`` (sorted; -1 = unused slot) and is kept for query i when
  ``pos <= i`` (causal) and the key is NOT in the query's band (``abs(i - pos) > w[h]``): a key that is
  also in the band is kept in the sequence part instead, so no key is ever counted twice;
* sequence key j is kept when ``abs(i - j) <= w[h]`` (and ``j <= i`` causal), or, for a head whose
  shared keys stay in place (``packed[h]`` False), when j is one of its shared keys.

Each query's kept keys are therefore exactly those of :meth:`HeadPattern.allowed`, and one softmax over
the layout's row equals the dense masked attention. The segment is sorted, so the causal test keeps a
prefix of it: query block n touches about ``n_keys(<= i) / B`` segment blocks, and the band stays on the
diagonal blocks because S is a multiple of B. A head is packed when that makes fewer blocks than leaving
its keys in place (for stride 1 or 2 it does not). :func:`block_occupancy` computes the blocks with a
kept entry (and the blocks with every entry kept) from interval arithmetic, without an L x L tensor;
:func:`block_mask` hands exactly these blocks to FlexAttention, and :func:`layout_stats` reports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from .patterns import HeadPattern, Pattern

if TYPE_CHECKING:  # pragma: no cover
    import torch

#: FlexAttention's default block size: the unit whose share of kept blocks its cost follows.
BLOCK = 128


@dataclass(frozen=True, eq=False)
class KeyLayout:
    """Where each head's kept keys sit on the key axis ``[S segment slots | L sequence keys]``."""

    L: int
    causal: bool
    block: int
    S: int  # segment length: a multiple of ``block`` (0 when no head is packed)
    window: np.ndarray  # [h] int64: band half-width, -1 = no band, L = dense
    pos: np.ndarray  # [h, max(S, 1)] int64: key position held by each slot, -1 = unused
    packed: np.ndarray  # [h] bool: shared keys moved to the segment
    inplace: np.ndarray  # [h, L] bool: shared keys of the heads left in place

    @property
    def n_heads(self) -> int:
        return len(self.window)

    @property
    def kv_len(self) -> int:
        return self.S + self.L

    def arrange(self, x: "torch.Tensor") -> "torch.Tensor":
        """Keys or values in this layout: x [b,h,L,e] -> [b,h,S+L,e] (segment gathered ahead of the sequence)."""
        import torch

        if not self.S:
            return x
        b, h, _, e = x.shape
        idx = torch.from_numpy(self.pos[:, : self.S].clip(min=0)).to(x.device)  # [h,s]
        seg = x.gather(2, idx[None, :, :, None].expand(b, h, self.S, e))
        return torch.cat([seg, x], dim=2)

    def mask_mod(self, device: "str | torch.device" = "cpu") -> Callable[..., Any]:
        """FlexAttention's ``mask_mod(b, h, i, kv) -> bool`` over this layout (True = may attend)."""
        import torch

        window = torch.from_numpy(self.window).to(device)
        pos = torch.from_numpy(self.pos).to(device)
        inplace = torch.from_numpy(self.inplace).to(device)
        S, L, causal, last_slot = self.S, self.L, self.causal, self.pos.shape[1] - 1

        def allowed(b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202 - FlexAttention's signature
            in_seg = kv_idx < S
            p = pos[h, kv_idx.clamp(0, last_slot)]
            seq = (kv_idx - S).clamp(0, L - 1)
            j = torch.where(in_seg, p, seq)
            band = (q_idx - j).abs() <= window[h]
            keep = torch.where(in_seg, (p >= 0) & ~band, band | inplace[h, seq])
            if causal:
                keep = keep & (j <= q_idx)
            return keep

        return allowed


def _blocks(L: int, B: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """First and last position of each block of B positions over [0, L), and whether it is complete."""
    lo = np.arange(0, L, B)
    hi = np.minimum(lo + B - 1, L - 1)
    return lo, hi, hi - lo + 1 == B


def _band_blocks(w: int, L: int, causal: bool, B: int) -> tuple[np.ndarray, np.ndarray]:
    """Kept / full [n, m] blocks of the band ``abs(i - j) <= w`` (w = -1: none) on the sequence part."""
    lo, hi, whole = _blocks(L, B)
    q_lo, q_hi, k_lo, k_hi = lo[:, None], hi[:, None], lo[None, :], hi[None, :]
    near = np.maximum(0, np.maximum(q_lo - k_hi, k_lo - q_hi))  # smallest |i - j| between the blocks
    far = np.maximum(q_hi - k_lo, k_hi - q_lo)  # largest
    kept = near <= w
    full = (far <= w) & whole[:, None] & whole[None, :]
    if causal:
        kept &= k_lo <= q_hi
        full &= k_hi <= q_lo
    return kept, full


def _inplace_blocks(keys: np.ndarray, L: int, causal: bool, B: int) -> tuple[np.ndarray, np.ndarray]:
    """Kept / full [n, m] blocks of shared keys left at their own positions."""
    lo, hi, whole = _blocks(L, B)
    first = np.searchsorted(keys, lo, side="left")
    count = np.searchsorted(keys, hi, side="right") - first
    smallest = np.where(count > 0, keys[np.minimum(first, max(len(keys) - 1, 0))] if len(keys) else 0, L)
    kept = np.broadcast_to(count[None, :] > 0, (len(lo), len(lo))).copy()
    full = np.broadcast_to((count == B)[None, :], kept.shape) & whole[:, None]
    if causal:
        kept &= smallest[None, :] <= hi[:, None]
        full = full & (hi[None, :] <= lo[:, None])
    return kept, full


def _segment_blocks(keys: np.ndarray, w: int, L: int, S: int, causal: bool, B: int) -> tuple[np.ndarray, np.ndarray]:
    """Kept / full [n, m] blocks of a head's packed segment (S slots, keys sorted, band w excluded)."""
    q_lo, q_hi, q_whole = _blocks(L, B)
    m = np.arange(0, S, B)
    n_keys = len(keys)
    used = m < n_keys
    last = np.minimum(m + B, n_keys) - 1
    o_lo = np.where(used, keys[np.minimum(m, max(n_keys - 1, 0))] if n_keys else 0, 0)[None, :]
    o_hi = np.where(used, keys[np.maximum(last, 0)] if n_keys else 0, 0)[None, :]
    whole = (m + B <= n_keys)[None, :] & q_whole[:, None]
    ql, qh = q_lo[:, None], q_hi[:, None]
    if causal:  # kept iff some pair has pos <= i - w - 1 (pos <= i and outside the band)
        kept = o_lo <= qh - w - 1
        full = whole & (o_hi <= ql - w - 1)
    else:  # kept iff some pair is farther apart than w; full iff every pair is
        kept = np.maximum(qh - o_lo, o_hi - ql) > w
        full = whole & (np.maximum(0, np.maximum(o_lo - qh, ql - o_hi)) > w)
    return kept & used[None, :], full & used[None, :]


def _inplace_count(keys: np.ndarray, w: int, L: int, causal: bool, B: int) -> int:
    """Blocks a head keeps with its shared keys left at their own positions (the band included)."""
    kept = _band_blocks(w, L, causal, B)[0]
    if len(keys):
        kept = kept | _inplace_blocks(keys, L, causal, B)[0]
    return int(kept.sum())


def _window(hp: HeadPattern, L: int) -> int:
    return L if hp.dense else (-1 if hp.window is None else int(hp.window))


@lru_cache(maxsize=64)
def key_layout(pattern: Pattern, L: int, causal: bool, block: int = BLOCK) -> KeyLayout:
    """The (cached) :class:`KeyLayout` of ``pattern`` at length L, blocks of ``block`` positions."""
    h = pattern.n_heads
    window = np.array([_window(hp, L) for hp in pattern.heads], dtype=np.int64)
    keys = [np.zeros(0, np.int64) if hp.dense else hp.shared_keys(L) for hp in pattern.heads]
    packed = np.zeros(h, dtype=bool)
    for i, ks in enumerate(keys):
        if len(ks):
            w = int(window[i])
            seg_len = -(-len(ks) // block) * block
            moved = _band_blocks(w, L, causal, block)[0].sum() + _segment_blocks(ks, w, L, seg_len, causal, block)[0].sum()
            packed[i] = moved < _inplace_count(ks, w, L, causal, block)
    S = max((-(-len(ks) // block) * block for ks, p in zip(keys, packed) if p), default=0)
    pos = np.full((h, max(S, 1)), -1, dtype=np.int64)
    inplace = np.zeros((h, L), dtype=bool)
    for i, ks in enumerate(keys):
        if packed[i]:
            pos[i, : len(ks)] = ks
        else:
            inplace[i, ks] = True
    return KeyLayout(L=L, causal=causal, block=block, S=S, window=window, pos=pos, packed=packed, inplace=inplace)


def block_occupancy(layout: KeyLayout, band_only: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Blocks with a kept entry and blocks with every entry kept: two bool arrays [h, n, m] over the layout's
    ``ceil(L / B)`` query blocks and ``ceil((S + L) / B)`` key blocks (``band_only``: the bands alone)."""
    L, B, S = layout.L, layout.block, layout.S
    nq, ns = -(-L // B), S // B
    kept = np.zeros((layout.n_heads, nq, ns + nq), dtype=bool)
    full = np.zeros_like(kept)
    for i in range(layout.n_heads):
        w = int(layout.window[i])
        kb, fb = _band_blocks(w, L, layout.causal, B)
        if not band_only:
            keys = np.flatnonzero(layout.inplace[i])
            if len(keys):
                ki, fi = _inplace_blocks(keys, L, layout.causal, B)
                kb, fb = kb | ki, fb | fi
            if layout.packed[i]:
                seg = layout.pos[i][layout.pos[i] >= 0]
                kept[i, :, :ns], full[i, :, :ns] = _segment_blocks(seg, w, L, S, layout.causal, B)
        kept[i, :, ns:], full[i, :, ns:] = kb, fb
    return kept, full


def dense_block_count(L: int, causal: bool, block: int = BLOCK) -> int:
    """Blocks per head of dense attention at length L (causal: the blocks on or below the diagonal)."""
    n = -(-L // block)
    return n * (n + 1) // 2 if causal else n * n


def layout_stats(pattern: Pattern, L: int, causal: bool, block: int = BLOCK) -> dict[str, Any]:
    """Entry and block densities of ``pattern`` at length L: what a block-sparse kernel computes.

    ``block_density``: blocks with a kept entry in the packed layout over the dense attention's blocks;
    ``band_block_density``: the same for the local bands alone (the diagonal blocks no layout avoids);
    ``inplace_block_density``: the blocks of the pattern left in the sequence's own order;
    ``blocks_skipped``: the dense attention's blocks the kernel does not compute (1 - block_density).
    """
    layout = key_layout(pattern, L, causal, block)
    dense = dense_block_count(L, causal, block) * pattern.n_heads
    kept, full = block_occupancy(layout)
    band, _ = block_occupancy(layout, band_only=True)
    here = sum(_inplace_count(np.zeros(0, np.int64) if hp.dense else hp.shared_keys(L), _window(hp, L), L, causal, block)
               for hp in pattern.heads)
    return {
        "pattern": pattern.name or "custom",
        "L": L,
        "causal": causal,
        "entry_density": pattern.density(L, causal),
        "block_density": int(kept.sum()) / dense,
        "band_block_density": int(band.sum()) / dense,
        "inplace_block_density": here / dense,
        "blocks_kept": int(kept.sum()),
        "blocks_full": int(full.sum()),
        "dense_blocks": dense,
        "blocks_skipped": 1 - int(kept.sum()) / dense,
        "segment": layout.S,
        "packed_heads": int(layout.packed.sum()),
    }


@lru_cache(maxsize=32)
def block_mask(pattern: Pattern, L: int, causal: bool, device: str, block: int = BLOCK) -> Any:
    """FlexAttention's BlockMask over the layout: exactly the blocks of :func:`block_occupancy`."""
    import torch
    from torch.nn.attention.flex_attention import BlockMask

    layout = key_layout(pattern, L, causal, block)
    kept, full = block_occupancy(layout)
    partial = kept & ~full

    def indices(blocks: np.ndarray) -> tuple["torch.Tensor", "torch.Tensor"]:
        counts = torch.from_numpy(blocks.sum(-1).astype(np.int32))[None]  # [1,h,n]
        order = np.argsort(~blocks, axis=-1, kind="stable").astype(np.int32)  # kept blocks first, in order
        return counts.to(device), torch.from_numpy(order)[None].to(device)

    with torch.inference_mode(False):  # cached: must stay usable outside inference mode (see attention.py)
        kv_num, kv_idx = indices(partial)
        full_num, full_idx = indices(full)
        return BlockMask.from_kv_blocks(kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=block,
                                        mask_mod=layout.mask_mod(device), seq_lengths=(L, layout.kv_len))
