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
The full set is exact (every block whose entries are all kept), so the ``mask_mod`` runs only on the
partial blocks (:func:`block_counts`); :meth:`KeyLayout.mask_mod` looks it up in the layout's tables, or
computes it by index arithmetic from the heads' strides and few extra keys (measured slower on an H200).
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
#: The mask_mod variants of :meth:`KeyLayout.mask_mod` (same mask, different work per entry).
MASK_KINDS = ("arith", "table")
#: The variant used unless one is asked for: on an H200 (torch 2.11, bf16, b 4, h 8, e 64, byte-sparse-8h,
#: L 16384, 64 x 64 tiles, 2026-11-28) the table lookups ran fwd 1.10 ms / fwd+bwd 3.60 ms and the arithmetic
#: 1.71 / 4.27 ms (the 2026-11-27 probe agreed: 0.65 / 2.88 vs 1.04 / 3.12 ms).
DEFAULT_MASK = "table"
#: Extra shared keys (anchors, positions off the stride) per head up to which the mask stays arithmetic.
MAX_ARITH_EXTRA = 16


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
    stride: np.ndarray  # [h] int64: the head's stride (0: none)
    extra: np.ndarray  # [h, X] int64: its other shared keys (anchors, positions; not on the stride), sorted, -1 = none

    @property
    def n_heads(self) -> int:
        return len(self.window)

    @property
    def kv_len(self) -> int:
        return self.S + self.L

    def arrange(self, x: "torch.Tensor") -> "torch.Tensor":
        """Keys or values in this layout: x [b,h,L,e] -> [b,h,S+L,e] (segment gathered ahead of the sequence)."""
        return arrange_keys(x, segment_index(self, str(x.device)) if self.S else None)

    def mask_mod(self, device: "str | torch.device" = "cpu", kind: str = DEFAULT_MASK) -> Callable[..., Any]:
        """FlexAttention's ``mask_mod(b, h, i, kv) -> bool`` over this layout (True = may attend).

        ``kind="table"`` (:data:`DEFAULT_MASK`) looks a slot's key and a key's membership up in ``pos [h, S]``
        and ``inplace [h, L]``; ``"arith"`` works both out from the head's stride and its few other shared keys
        (:data:`MAX_ARITH_EXTRA` at most; more: the table lookups), with no per-key table. Both give the
        same mask (tested); the table ran faster on an H200 (:data:`DEFAULT_MASK`), and
        benchmarks/sparse_attention_gpu.py --sweep times the other one beside it."""
        if kind not in MASK_KINDS:
            raise ValueError(f"mask kind must be one of {', '.join(MASK_KINDS)}, not {kind!r}")
        if kind == "table" or self.extra.shape[1] > MAX_ARITH_EXTRA:
            return self._table_mask(device)
        return self._arith_mask(device)

    def _table_mask(self, device: "str | torch.device") -> Callable[..., Any]:
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

    def _arith_mask(self, device: "str | torch.device") -> Callable[..., Any]:
        """Index arithmetic only: every table here is indexed by the head alone (one value per program).

        Segment slot x of a packed head holds its sorted shared keys: extra key c sits at slot
        ``slot[h, c]``, and any other slot holds the stride key ``(x - #extra slots before x) * stride``.
        A sequence key is a shared key of an in-place head when ``j % stride == 0`` or it equals one of the
        head's extra keys. Parts no head needs (no packed head, no in-place shared keys) are left out."""
        import torch

        h_n, X = self.extra.shape
        has = self.extra >= 0  # [h, X]
        never = -(self.S + self.L + 1)  # a slot / key no index equals or passes
        seg_n = np.where(self.packed, (self.pos >= 0).sum(1), 0)  # [h] used slots
        slot = np.full((h_n, X), self.S + self.L + 1, dtype=np.int64)
        seq_extra = np.full((h_n, X), never, dtype=np.int64)
        for i in range(h_n):
            keys = self.extra[i][has[i]]
            if self.packed[i]:
                slot[i, : len(keys)] = np.searchsorted(self.pos[i, : seg_n[i]], keys)
            else:
                seq_extra[i, : len(keys)] = keys
        seg_stride = np.where(self.packed, self.stride, 0)
        seq_stride = np.where(self.packed, 0, self.stride)
        X_seg = int((has & self.packed[:, None]).sum(1).max(initial=0))
        X_seq = int((has & ~self.packed[:, None]).sum(1).max(initial=0))
        inplace_keys = bool(seq_stride.any() or X_seq)
        t = lambda a: torch.from_numpy(np.ascontiguousarray(a)).to(device)  # noqa: E731
        window, seg_n_t, seg_stride_t, seq_stride_t = t(self.window), t(seg_n), t(seg_stride), t(seq_stride)
        slot_t, extra_t, seq_extra_t = t(slot[:, :X_seg]), t(np.where(has, self.extra, 0)[:, :X_seg]), t(seq_extra[:, :X_seq])
        S, causal = self.S, self.causal

        def allowed(b, h, q_idx, kv_idx):  # noqa: ANN001, ANN202 - FlexAttention's signature
            j = kv_idx - S  # the sequence key (negative on the segment)
            if S:
                in_seg = kv_idx < S
                before = sum((slot_t[h, c] < kv_idx).to(kv_idx.dtype) for c in range(X_seg)) if X_seg else 0
                p = (kv_idx - before) * seg_stride_t[h]
                for c in range(X_seg):
                    p = torch.where(kv_idx == slot_t[h, c], extra_t[h, c], p)
                j = torch.where(in_seg, p, j)
            band = (q_idx - j).abs() <= window[h]
            seq_keep = band
            if inplace_keys:
                st = seq_stride_t[h]
                shared = (st > 0) & (j % st.clamp(min=1) == 0)
                for c in range(X_seq):
                    shared = shared | (j == seq_extra_t[h, c])
                seq_keep = band | shared
            keep = torch.where(in_seg, (kv_idx < seg_n_t[h]) & ~band, seq_keep) if S else seq_keep
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
    else:  # kept iff some pair is farther apart than w; full iff none of the block's keys is within w of a query
        kept = np.maximum(qh - o_lo, o_hi - ql) > w
        near_lo = np.searchsorted(keys, q_lo - w, side="left")[:, None]  # slots of the keys in [ql - w, qh + w]
        near_hi = np.searchsorted(keys, q_hi + w, side="right")[:, None]
        full = whole & ((np.minimum(near_hi, (m + B)[None, :]) <= np.maximum(near_lo, m[None, :])) | (w < 0))
    return kept & used[None, :], full & used[None, :]


def _sequence_full(shared: np.ndarray, w: int, L: int, causal: bool, B: int) -> np.ndarray:
    """Full [n, m] blocks of the sequence part: every (i, j) kept by the band or a shared key left in place.

    A key block is full for a query block when its keys that are not shared all lie within w of every
    query (its smallest and largest such key decide) and, causal, the whole key block is at or below the
    query block's first row."""
    lo, hi, whole = _blocks(L, B)
    j = np.arange(len(lo) * B)
    own = np.concatenate([~shared, np.zeros(len(j) - L, dtype=bool)]).reshape(-1, B)  # [m, B] keys not shared
    first = np.where(own.any(1), (j.reshape(-1, B) + np.where(own, 0, L)).min(1), L)
    last = np.where(own.any(1), (j.reshape(-1, B) - np.where(own, 0, L)).max(1), -1)
    none = ~own.any(1)[None, :]
    ql, qh = lo[:, None], hi[:, None]
    full = (none | ((qh - first[None, :] <= w) & (last[None, :] - ql <= w))) & whole[:, None] & whole[None, :]
    if causal:
        full &= hi[None, :] <= ql
    return full


def _inplace_count(keys: np.ndarray, w: int, L: int, causal: bool, B: int) -> int:
    """Blocks a head keeps with its shared keys left at their own positions (the band included)."""
    kept = _band_blocks(w, L, causal, B)[0]
    if len(keys):
        kept = kept | _inplace_blocks(keys, L, causal, B)[0]
    return int(kept.sum())


def _window(hp: HeadPattern, L: int) -> int:
    return L if hp.dense else (-1 if hp.window is None else int(hp.window))


def arrange_keys(x: "torch.Tensor", index: "torch.Tensor | None") -> "torch.Tensor":
    """x [b,h,L,e] -> [b,h,S+L,e]: the keys the segment slots name (``index`` [h, S]), then the sequence."""
    import torch

    if index is None:
        return x
    b, h, _, e = x.shape
    seg = x.gather(2, index[None, :, :, None].expand(b, h, index.shape[1], e))  # [b,h,S,e]
    return torch.cat([seg, x], dim=2)


@lru_cache(maxsize=64)
def segment_index(layout: KeyLayout, device: str) -> "torch.Tensor":
    """The key position each segment slot holds, [h, S] int64 on ``device`` (unused slots: 0), made once per
    layout and device: a host-to-device copy in every call would make each attention call wait for the GPU."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(layout.pos[:, : layout.S].clip(min=0))).to(device)


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
    stride = np.array([0 if hp.dense or not hp.stride else int(hp.stride) for hp in pattern.heads], dtype=np.int64)
    extras = [ks[ks % s != 0] if s else ks for ks, s in zip(keys, stride)]  # shared keys off the stride
    extra = np.full((h, max((len(x) for x in extras), default=0)), -1, dtype=np.int64)
    for i, x in enumerate(extras):
        extra[i, : len(x)] = x
    return KeyLayout(L=L, causal=causal, block=block, S=S, window=window, pos=pos, packed=packed, inplace=inplace,
                     stride=stride, extra=extra)


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
            if len(keys):  # the band and the shared keys may fill a block together
                kb, fb = kb | _inplace_blocks(keys, L, layout.causal, B)[0], _sequence_full(layout.inplace[i], w, L,
                                                                                          layout.causal, B)
            if layout.packed[i]:
                seg = layout.pos[i][layout.pos[i] >= 0]
                kept[i, :, :ns], full[i, :, :ns] = _segment_blocks(seg, w, L, S, layout.causal, B)
        kept[i, :, ns:], full[i, :, ns:] = kb, fb
    return kept, full


def block_counts(pattern: Pattern, L: int, causal: bool, block: int = BLOCK) -> dict[str, int]:
    """Blocks of the layout FlexAttention computes, summed over heads: ``kept`` (any entry kept), ``full`` (every
    entry kept: marked full, no ``mask_mod`` call), ``partial`` (the rest of the kept: ``mask_mod`` per entry)."""
    kept, full = block_occupancy(key_layout(pattern, L, causal, block))
    return {"kept": int(kept.sum()), "full": int(full.sum()), "partial": int((kept & ~full).sum())}


def dense_block_count(L: int, causal: bool, block: int = BLOCK) -> int:
    """Blocks per head of dense attention at length L (causal: the blocks on or below the diagonal)."""
    n = -(-L // block)
    return n * (n + 1) // 2 if causal else n * n


def layout_stats(pattern: Pattern, L: int, causal: bool, block: int = BLOCK) -> dict[str, Any]:
    """Entry and block densities of ``pattern`` at length L: what a block-sparse kernel computes.

    ``block_density``: blocks with a kept entry in the packed layout over the dense attention's blocks;
    ``band_block_density``: the same for the local bands alone (the diagonal blocks no layout avoids);
    ``inplace_block_density``: the blocks of the pattern left in the sequence's own order;
    ``blocks_skipped``: the dense attention's blocks the kernel does not compute (1 - block_density);
    ``blocks_full`` / ``blocks_partial``: the kept blocks computed without / with the ``mask_mod``
    (:func:`block_counts`).
    """
    layout = key_layout(pattern, L, causal, block)
    dense = dense_block_count(L, causal, block) * pattern.n_heads
    counts = block_counts(pattern, L, causal, block)
    band, _ = block_occupancy(layout, band_only=True)
    here = sum(_inplace_count(np.zeros(0, np.int64) if hp.dense else hp.shared_keys(L), _window(hp, L), L, causal, block)
               for hp in pattern.heads)
    return {
        "pattern": pattern.name or "custom",
        "L": L,
        "causal": causal,
        "entry_density": pattern.density(L, causal),
        "block_density": counts["kept"] / dense,
        "band_block_density": int(band.sum()) / dense,
        "inplace_block_density": here / dense,
        "blocks_kept": counts["kept"],
        "blocks_full": counts["full"],
        "blocks_partial": counts["partial"],
        "dense_blocks": dense,
        "blocks_skipped": 1 - counts["kept"] / dense,
        "segment": layout.S,
        "packed_heads": int(layout.packed.sum()),
    }


@lru_cache(maxsize=32)
def block_mask(pattern: Pattern, L: int, causal: bool, device: str, block: int = BLOCK,
               mask: str = DEFAULT_MASK) -> Any:
    """FlexAttention's BlockMask over the layout: exactly the blocks of :func:`block_occupancy` (every block
    whose entries are all kept marked full, so its ``mask_mod``, of ``kind=mask``, is never called)."""
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
                                        mask_mod=layout.mask_mod(device, mask), seq_lengths=(L, layout.kv_len))
