"""Sparse attention whose cost follows the pattern's density, and its dense masked reference.

Einstein legend: b batch, h head, i/j query/key positions (t of them), e head dim,
n block index, a position inside a query block, c position inside a key window, s shared key.

How it works (:func:`sparse_attention`): heads with the same :class:`HeadPattern` are processed
together. For each such group the kept keys of query i are the UNION of

* a local band ``abs(i - j) <= w``: queries are cut into blocks of B positions and each block
  scores only the ``B + w`` (causal) or ``B + 2w`` keys around it (``Tensor.unfold`` windows, so
  no L x L matrix is formed), and
* a set of shared keys (strides, anchors, positions) that is the same for every query: gathered
  once, scored as a ``[t, n_shared]`` matrix; shared keys already inside a query's band are masked
  out there so no key is counted twice.

Both parts go through ONE softmax per query row, so the result equals the dense masked attention
(:func:`dense_attention`, or ``F.scaled_dot_product_attention`` with the boolean mask) to float
tolerance, forward and backward (plain autograd ops throughout). On CUDA, ``impl="auto"`` runs the
pattern through FlexAttention instead (:mod:`attnscope.sparse.flex`: the pattern as a ``mask_mod`` on
indices and a block mask, fused forward and backward); FlexAttention has no CPU backward, so the
gathered kernel stays the CPU path.

Rows with no allowed key (possible with e.g. anchor-only patterns) are defined to attend to
nothing: their probabilities are all zero and their output is the zero vector (never NaN); the
dense reference here follows the same convention. Masks: True = may attend, everywhere.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

from attnscope.errors import ConfigError

from .patterns import HeadPattern, Pattern, load_pattern

if TYPE_CHECKING:  # pragma: no cover
    import torch


def _masked_softmax(scores: "torch.Tensor", mask: "torch.Tensor", has_empty_rows: bool) -> "torch.Tensor":
    """Softmax over the last axis with ``mask`` (True = keep); rows with no kept entry give zeros."""
    import torch

    s = scores.masked_fill(~mask, float("-inf"))
    if not has_empty_rows:
        return torch.softmax(s, dim=-1)
    m = s.amax(dim=-1, keepdim=True).detach()
    m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
    p = torch.exp(s - m)
    den = p.sum(dim=-1, keepdim=True)
    return p / torch.where(den > 0, den, torch.ones_like(den))


def dense_attention(
    q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", mask: "torch.Tensor", scale: float | None = None
) -> tuple["torch.Tensor", "torch.Tensor"]:
    """The explicit dense reference: q,k,v [b,h,t,e], mask [h,t,t] or [t,t] bool -> (out [b,h,t,e], probs [b,h,t,t])."""
    scale = q.shape[-1] ** -0.5 if scale is None else scale
    scores = (q @ k.transpose(-1, -2)) * scale  # [b,h,i,j]
    probs = _masked_softmax(scores, mask, has_empty_rows=bool((~mask.any(-1)).any()))
    return probs @ v, probs


# ---- static index / mask tensors, cached per (head pattern, length, causal, device) --------------
#: "auto" gathers unless a query's gathered keys (band window + shared keys) reach t / GATHER_MIN_SAVING.
#: Measured on CPU (torch 2.13, L = 256, byte-sparse-8h, 4-layer training step): gathering was still faster
#: than the masked dense product (SDPA with a boolean mask takes its slow math path), so the dense
#: path is only taken when gathering saves nothing. Both paths compute the same function (tested).
GATHER_MIN_SAVING = 1.0
IMPLS = ("auto", "gather", "dense", "flex")


def _block_size(w: int) -> int:
    return min(max(w, 16), 128)


def _normal_tensors(fn):
    """Build cached tensors outside inference mode: a cache filled under ``torch.inference_mode()``
    (head extraction) would otherwise hand inference tensors to a later training step."""
    from functools import wraps

    @wraps(fn)
    def build(*args):
        import torch

        with torch.inference_mode(False):
            return fn(*args)

    return build


@lru_cache(maxsize=256)
@_normal_tensors
def _plan(hp: HeadPattern, t: int, causal: bool, device: str) -> dict[str, Any]:
    import torch

    plan: dict[str, Any] = {}
    i_all = torch.arange(t)
    rows_with_key = torch.zeros(t, dtype=torch.bool)
    if hp.window is not None:
        w = int(hp.window)
        B = _block_size(w)
        nb = -(-t // B)
        W = B + w if causal else B + 2 * w
        n = torch.arange(nb)[:, None, None]
        a = torch.arange(B)[None, :, None]
        c = torch.arange(W)[None, None, :]
        i = n * B + a  # [n,a,1]
        j = n * B - w + c  # [n,1,c]
        mb = ((i - j).abs() <= w) & (j >= 0) & (j < t) & (i < t)
        if causal:
            mb &= j <= i
        jidx = j.expand(nb, B, W).reshape(nb * B, W)[:t].clamp(0, t - 1)  # [i, c] key index
        mb_flat = mb.reshape(nb * B, W)[:t]
        rows_with_key |= mb_flat.any(-1)
        plan.update(w=w, B=B, nb=nb, W=W, band_mask=mb_flat.to(device), band_idx=jidx.to(device))
    keys = torch.from_numpy(hp.shared_keys(t))
    if len(keys):
        ms = torch.ones(t, len(keys), dtype=torch.bool)
        if causal:
            ms &= keys[None, :] <= i_all[:, None]
        if hp.window is not None:
            ms &= (i_all[:, None] - keys[None, :]).abs() > int(hp.window)
        if ms.any():
            rows_with_key |= ms.any(-1)
            plan.update(keys=keys.to(device), shared_mask=ms.to(device))
    plan["has_empty_rows"] = bool((~rows_with_key).any())
    plan["width"] = plan.get("W", 0) + (len(plan["keys"]) if "keys" in plan else 0)
    return plan


@lru_cache(maxsize=64)
@_normal_tensors
def _group_mask(hp: HeadPattern, t: int, causal: bool, device: str) -> "torch.Tensor":
    import torch

    return torch.from_numpy(hp.allowed(t, causal)).to(device)


def _group_attention(
    q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", hp: HeadPattern, causal: bool, scale: float,
    return_probs: bool, impl: str = "auto",
) -> tuple["torch.Tensor", "torch.Tensor | None"]:
    """Attention for heads sharing one pattern: q,k,v [b,g,t,e] -> out [b,g,t,e] (+ probs [b,g,t,t])."""
    import torch
    import torch.nn.functional as F

    b, g, t, e = q.shape
    if hp.dense:
        if return_probs:
            mask = torch.ones(t, t, dtype=torch.bool, device=q.device)
            if causal:
                mask = torch.tril(mask)
            return dense_attention(q, k, v, mask, scale)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale), None

    plan = _plan(hp, t, causal, str(q.device))
    if impl == "dense" or (impl == "auto" and plan["width"] * GATHER_MIN_SAVING >= t):
        mask = _group_mask(hp, t, causal, str(q.device))
        if return_probs or plan["has_empty_rows"]:
            out, probs = dense_attention(q, k, v, mask, scale)
            return out, (probs if return_probs else None)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale), None
    parts: list[torch.Tensor] = []
    masks: list[torch.Tensor] = []
    if "band_mask" in plan:
        w, B, nb, W = plan["w"], plan["B"], plan["nb"], plan["W"]
        t_pad = nb * B
        right = t_pad - t + (0 if causal else w)
        qb = F.pad(q, (0, 0, 0, t_pad - t)).view(b, g, nb, B, e)
        # overlapping key windows, materialised once (matmul on the strided view would copy per block)
        kb = F.pad(k, (0, 0, w, right)).unfold(2, W, B).transpose(-1, -2).contiguous()  # [b,g,n,c,e]
        vb = F.pad(v, (0, 0, w, right)).unfold(2, W, B).transpose(-1, -2).contiguous()  # [b,g,n,c,e]
        sb = (qb @ kb.transpose(-1, -2)) * scale  # [b,g,n,a,c]
        parts.append(sb.reshape(b, g, t_pad, W)[:, :, :t])
        masks.append(plan["band_mask"])
    if "keys" in plan:
        keys = plan["keys"]
        ks = k.index_select(2, keys)  # [b,g,s,e]
        vs = v.index_select(2, keys)
        parts.append((q @ ks.transpose(-1, -2)) * scale)  # [b,g,i,s]
        masks.append(plan["shared_mask"])
    scores = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
    mask = masks[0] if len(masks) == 1 else torch.cat(masks, dim=-1)
    p = _masked_softmax(scores, mask, plan["has_empty_rows"])  # [b,g,i,c+s]

    out = None
    dense_p = torch.zeros(b, g, t, t, dtype=q.dtype, device=q.device) if return_probs else None
    offset = 0
    if "band_mask" in plan:
        pb = p[..., :W]
        offset = W
        pb_pad = F.pad(pb, (0, 0, 0, t_pad - t)).view(b, g, nb, B, W)
        out = (pb_pad @ vb).reshape(b, g, t_pad, e)[:, :, :t]
        if dense_p is not None:
            dense_p = dense_p.scatter_add(-1, plan["band_idx"].expand(b, g, t, W), pb)
    if "keys" in plan:
        ps = p[..., offset:].contiguous()  # a strided slice makes bmm fall back to per-matrix copies
        os_ = ps @ vs
        out = os_ if out is None else out + os_
        if dense_p is not None:
            dense_p = dense_p.scatter_add(-1, plan["keys"].expand(b, g, t, len(plan["keys"])), ps)
    if out is None:  # every row empty (e.g. anchors beyond a causal prefix): attends to nothing
        out = torch.zeros_like(q) + 0 * q.sum()
    return out, dense_p


@lru_cache(maxsize=32)
def _cached_pattern(spec: str, n_heads: int) -> Pattern:
    """Preset names and spec files are parsed once per process, not once per layer and step."""
    return load_pattern(spec, n_heads=n_heads)


def _groups(pattern: Pattern) -> list[tuple[HeadPattern, list[int]]]:
    groups: dict[HeadPattern, list[int]] = {}
    for h, hp in enumerate(pattern.heads):
        groups.setdefault(hp, []).append(h)
    return list(groups.items())


def sparse_attention(
    q: "torch.Tensor",
    k: "torch.Tensor",
    v: "torch.Tensor",
    pattern: "Pattern | str | Any",
    causal: bool = True,
    return_probs: bool = False,
    scale: float | None = None,
    impl: str = "auto",
) -> "torch.Tensor | tuple[torch.Tensor, torch.Tensor]":
    """Attention restricted to a per-head pattern: q,k,v [b,h,t,e] -> out [b,h,t,e] (, probs [b,h,t,t]).

    ``pattern`` is a :class:`Pattern` or anything :func:`load_pattern` accepts; it must have h heads.
    Equal to dense attention with :func:`attnscope.sparse.dense_mask` (True = may attend) to float
    tolerance; autograd-capable. ``return_probs`` also returns the dense [b,h,t,t] probabilities
    (costs t^2 memory: meant for analysis, not training). ``impl``: ``"gather"`` (band + shared keys),
    ``"dense"`` (masked dense product), ``"flex"`` (FlexAttention with the pattern's block mask) or
    ``"auto"`` (flex on CUDA when no probabilities are asked for; else gather unless that touches
    every key anyway).
    """
    import torch

    if q.dim() != 4 or k.shape != q.shape or v.shape[:3] != q.shape[:3]:
        raise ConfigError(f"sparse_attention wants q, k, v as [b,h,t,e]; got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if impl not in IMPLS:
        raise ConfigError(f"impl must be one of {', '.join(IMPLS)}, not {impl!r}")
    b, h, t, e = q.shape
    pat = _cached_pattern(pattern, h) if isinstance(pattern, str) else load_pattern(pattern, n_heads=h)
    scale = e**-0.5 if scale is None else float(scale)
    if impl == "flex" or (impl == "auto" and q.device.type == "cuda" and not return_probs and _flex_ok()):
        if return_probs:
            raise ConfigError("impl='flex' cannot return probabilities; use impl='gather' or 'dense'")
        from .flex import flex_sparse_attention

        return flex_sparse_attention(q, k, v, pat, causal, scale)
    outs: list[torch.Tensor] = []
    probs: list[torch.Tensor] = []
    order: list[int] = []
    for hp, heads in _groups(pat):
        if heads == list(range(heads[0], heads[-1] + 1)):
            sl = slice(heads[0], heads[-1] + 1)
            qg, kg, vg = q[:, sl], k[:, sl], v[:, sl]
        else:
            idx = torch.tensor(heads, device=q.device)
            qg, kg, vg = q.index_select(1, idx), k.index_select(1, idx), v.index_select(1, idx)
        og, pg = _group_attention(qg, kg, vg, hp, causal, scale, return_probs, impl)
        outs.append(og)
        if pg is not None:
            probs.append(pg)
        order.extend(heads)
    if len(outs) == 1 and order == list(range(h)):
        out = outs[0]
        prob = probs[0] if return_probs else None
    elif order == list(range(h)):
        out = torch.cat(outs, dim=1)
        prob = torch.cat(probs, dim=1) if return_probs else None
    else:
        inv = torch.empty(h, dtype=torch.long)
        inv[torch.tensor(order)] = torch.arange(h)
        inv = inv.to(q.device)
        out = torch.cat(outs, dim=1).index_select(1, inv)
        prob = torch.cat(probs, dim=1).index_select(1, inv) if return_probs else None
    return (out, prob) if return_probs else out


@lru_cache(maxsize=1)
def _flex_ok() -> bool:
    from .flex import available

    return available()
