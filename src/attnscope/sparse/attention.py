"""Sparse attention whose cost follows the pattern's density, and its dense masked reference.

Einstein legend: b batch, h head, i/j query/key positions (t of them), e head dim,
n block index, a position inside a query block, c position inside a key window, s shared key.

How it works (:func:`sparse_attention`): heads with the same :class:`HeadPattern` are processed
together, over the key layout of :mod:`attnscope.sparse.layout`. For each such group the kept keys
of query i are the UNION of

* a local band ``abs(i - j) <= w``: queries are cut into blocks of B positions and each block
  scores only the ``B + w`` (causal) or ``B + 2w`` keys around it (``Tensor.unfold`` windows, so
  no L x L matrix is formed), and
* the segment of shared keys (strides, anchors, positions, the same for every query, sorted):
  gathered once and scored as a ``[t, s]`` matrix (causal: a chunk of queries scores only the prefix
  of the segment it can see); shared keys inside a query's band are masked out there so no key is
  counted twice.

Both parts go through ONE softmax per query row, so the result equals the dense masked attention
(:func:`dense_attention`, or ``F.scaled_dot_product_attention`` with the boolean mask) to float
tolerance, forward and backward (plain autograd ops throughout). Problems larger than
:data:`CHUNK_ELEMENTS` score entries run in query chunks, recomputed in the backward pass, so memory
stays near O(L e). bf16 / fp16 inputs are computed in float32 and rounded once. On CUDA,
``impl="auto"`` runs the pattern through FlexAttention instead (:mod:`attnscope.sparse.flex`, block
sparse over the same layout); if compiling it fails, one warning and the gathered kernel. FlexAttention
has no CPU backward, so the gathered kernel stays the CPU path.

Rows with no allowed key (possible with e.g. anchor-only patterns) are defined to attend to
nothing: their probabilities are all zero and their output is the zero vector (never NaN); the
dense reference here follows the same convention. Masks: True = may attend, everywhere.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from attnscope.errors import ConfigError

from .patterns import HeadPattern, Pattern, load_pattern

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from .flex import FlexPlan


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


# ---- the gathered kernel ---------------------------------------------------------------------------
#: "auto" gathers unless a query's gathered keys (band window + shared keys) reach t / GATHER_MIN_SAVING.
#: Measured on CPU (torch 2.13, L = 256, byte-sparse-8h, 4-layer training step): gathering was still faster
#: than the masked dense product (SDPA with a boolean mask takes its slow math path), so the dense
#: path is only taken when gathering saves nothing. Both paths compute the same function (tested).
GATHER_MIN_SAVING = 1.0
IMPLS = ("auto", "gather", "dense", "flex")
#: Score entries (batch x heads x query rows x gathered keys) the gathered kernel holds at once. A larger
#: problem is cut into query chunks (whole blocks); with gradients each chunk is recomputed in the
#: backward pass (``torch.utils.checkpoint``), so memory is one chunk's scores plus O(L e), not every
#: kept score. 2**22 float32 entries: 16 MB per score-sized tensor.
CHUNK_ELEMENTS = 2**22


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
    """Sizes of the band windows and the shared-key segment (the layout's, see :mod:`.layout`) at length t."""
    import numpy as np
    import torch

    w = -1 if hp.window is None else int(hp.window)
    plan: dict[str, Any] = {"w": w}
    if w >= 0:
        B = _block_size(w)
        plan.update(B=B, nb=-(-t // B), W=B + w if causal else B + 2 * w)
    keys = hp.shared_keys(t)
    # a shared key is used only where it lies outside the band: some query is farther than w from it
    if len(keys) and (keys[0] <= t - 2 - w if causal else max(t - 1 - keys[0], keys[-1]) > w):
        plan.update(keys_np=keys, keys=torch.from_numpy(keys).to(device))
    else:
        keys = np.zeros(0, dtype=np.int64)
    plan["has_empty_rows"] = w < 0 and (not len(keys) or (causal and int(keys[0]) > 0))
    plan["width"] = plan.get("W", 0) + len(keys)
    return plan


@lru_cache(maxsize=64)
@_normal_tensors
def _group_mask(hp: HeadPattern, t: int, causal: bool, device: str) -> "torch.Tensor":
    import torch

    return torch.from_numpy(hp.allowed(t, causal)).to(device)


def _chunk(qc: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", ks: "torch.Tensor | None",
           vs: "torch.Tensor | None", r0: int, plan: dict[str, Any], t: int, causal: bool, scale: float,
           probs: "torch.Tensor | None" = None) -> "torch.Tensor":
    """Query rows r0 .. r0+c-1 of one head group: qc [b,g,c,e] -> out [b,g,c,ev] (ev: v's head dim).

    k, v: the group's keys / values [b,g,t,e] (the band's windows are cut from them); ks, vs:
    the segment's keys a chunk can see ([b,g,s,e]; None without shared keys). ``probs`` ([b,g,c,t]):
    filled with the dense probabilities of these rows when given."""
    import torch
    import torch.nn.functional as F

    b, g, c, e = qc.shape
    i = torch.arange(r0, r0 + c, device=qc.device)
    parts: list[torch.Tensor] = []
    masks: list[torch.Tensor] = []
    band = "W" in plan
    if band:
        w, B, W = plan["w"], plan["B"], plan["W"]
        nbc = -(-c // B)
        qb = F.pad(qc, (0, 0, 0, nbc * B - c)).view(b, g, nbc, B, e)
        lo, hi = r0 - w, r0 + (nbc - 1) * B + W - w  # the keys these blocks' windows span, zero-padded outside [0, t)
        pad = (0, 0, max(0, -lo), max(0, hi - t))
        # overlapping key windows, materialised once (matmul on the strided view would copy per block)
        kb = F.pad(k[:, :, max(lo, 0):min(hi, t)], pad).unfold(2, W, B).transpose(-1, -2).contiguous()  # [b,g,n,c,e]
        vb = F.pad(v[:, :, max(lo, 0):min(hi, t)], pad).unfold(2, W, B).transpose(-1, -2).contiguous()
        parts.append(((qb @ kb.transpose(-1, -2)) * scale).reshape(b, g, nbc * B, W)[:, :, :c])  # [b,g,i,c]
        j = (r0 + torch.arange(nbc, device=qc.device)[:, None] * B - w
             + torch.arange(W, device=qc.device)[None, :]).repeat_interleave(B, 0)[:c]  # [i,c] key index
        mb = ((i[:, None] - j).abs() <= w) & (j >= 0) & (j < t)
        masks.append(mb & (j <= i[:, None]) if causal else mb)
    if ks is not None:
        keys = plan["keys"][: ks.shape[2]]
        parts.append((qc @ ks.transpose(-1, -2)) * scale)  # [b,g,i,s]
        ms = (i[:, None] - keys[None, :]).abs() > plan["w"]
        masks.append(ms & (keys[None, :] <= i[:, None]) if causal else ms)
    if not parts:  # nothing visible from these rows: they attend to nothing
        return qc.new_zeros(b, g, c, v.shape[-1]) + 0 * (qc.sum() + k.sum() + v.sum())
    scores = parts[0] if len(parts) == 1 else torch.cat(parts, dim=-1)
    mask = masks[0] if len(masks) == 1 else torch.cat(masks, dim=-1)
    p = _masked_softmax(scores, mask, plan["has_empty_rows"])  # [b,g,i,c+s]
    out = None
    if band:
        pb = p[..., :W]
        out = (F.pad(pb, (0, 0, 0, nbc * B - c)).view(b, g, nbc, B, W) @ vb).reshape(b, g, nbc * B, v.shape[-1])[:, :, :c]
        if probs is not None:
            probs.scatter_add_(-1, j.clamp(0, t - 1).expand(b, g, c, W), pb.to(probs.dtype))
    if ks is not None:
        ps = p[..., p.shape[-1] - ks.shape[2]:].contiguous()  # a strided slice makes bmm copy per matrix
        out = ps @ vs if out is None else out + ps @ vs
        if probs is not None:
            probs.scatter_add_(-1, keys.expand(b, g, c, len(keys)), ps.to(probs.dtype))
    return out


def _group_attention(
    q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", hp: HeadPattern, causal: bool, scale: float,
    return_probs: bool, impl: str = "auto",
) -> tuple["torch.Tensor", "torch.Tensor | None"]:
    """Attention for heads sharing one pattern: q,k,v [b,g,t,e] -> out [b,g,t,e] (+ probs [b,g,t,t])."""
    import numpy as np
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
    # bf16 / fp16 inputs: scores, softmax and sums in float32, rounded once at the end (as fused kernels do)
    work = torch.float32 if q.dtype in (torch.bfloat16, torch.float16) else q.dtype
    with torch.autocast(q.device.type, enabled=False):
        qw, kw, vw = (x.to(work) for x in (q, k, v))
        ks = vs = None
        step = max(1, CHUNK_ELEMENTS // max(1, b * g * plan["width"]))
        if "W" in plan:
            step = max(plan["B"], step // plan["B"] * plan["B"])
        if "keys" in plan:
            ks, vs = kw.index_select(2, plan["keys"]), vw.index_select(2, plan["keys"])  # the segment [b,g,s,e]
        chunks = [(r0, min(r0 + step, t)) for r0 in range(0, t, step)]
        recompute = len(chunks) > 1 and torch.is_grad_enabled() and any(x.requires_grad for x in (q, k, v))
        dense_p = torch.zeros(b, g, t, t, dtype=q.dtype, device=q.device) if return_probs else None
        outs = []
        for r0, r1 in chunks:
            seen = None
            if ks is not None:  # causal: the segment is sorted, so rows up to r1 - 1 see a prefix of it
                n = int(np.searchsorted(plan["keys_np"], r1 - 1, side="right")) if causal else ks.shape[2]
                seen = (ks[:, :, :n], vs[:, :, :n]) if n else None
            args = (qw[:, :, r0:r1], kw, vw, *(seen or (None, None)))
            rows = None if dense_p is None else dense_p[:, :, r0:r1]
            if recompute and rows is None:
                from torch.utils.checkpoint import checkpoint

                outs.append(checkpoint(_chunk, *args, r0, plan, t, causal, scale, use_reentrant=False))
            else:
                outs.append(_chunk(*args, r0, plan, t, causal, scale, rows))
        out = outs[0] if len(outs) == 1 else torch.cat(outs, dim=2)
    return out.to(q.dtype), dense_p


@lru_cache(maxsize=32)
def _cached_pattern(spec: str, n_heads: int, stamp: tuple[int, int] | None) -> Pattern:
    """Preset names and spec files are parsed once, not once per layer and step; a file again once it changed
    (``stamp``: its modification time and size, so an edited pattern file is never answered from the cache)."""
    return load_pattern(spec, n_heads=n_heads)


def _file_stamp(spec: str) -> tuple[int, int] | None:
    import os

    try:
        st = os.stat(spec)
    except (OSError, ValueError):
        return None
    return st.st_mtime_ns, st.st_size


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
    kernel_options: dict[str, Any] | None = None,
) -> "torch.Tensor | tuple[torch.Tensor, torch.Tensor]":
    """Attention restricted to a per-head pattern: q,k [b,h,t,e], v [b,h,t,ev] -> out [b,h,t,ev] (, probs [b,h,t,t]).

    ``pattern`` is a :class:`Pattern` or anything :func:`load_pattern` accepts; it must have h heads.
    Equal to dense attention with :func:`attnscope.sparse.dense_mask` (True = may attend) to float
    tolerance; autograd-capable. ``return_probs`` also returns the dense [b,h,t,t] probabilities
    (costs t^2 memory: meant for analysis, not training). ``impl``: ``"gather"`` (band + shared keys),
    ``"dense"`` (masked dense product), ``"flex"`` (FlexAttention with the pattern's block mask) or
    ``"auto"`` (flex on CUDA when no probabilities are asked for; else gather unless that touches
    every key anyway). ``kernel_options``: FlexAttention's (e.g. ``{"BLOCK_M": 64, "BLOCK_N": 64}``); None:
    chosen per shape and device (:mod:`attnscope.sparse.tuning`).
    """
    import torch

    _check_inputs(q, k, v, scale, causal, return_probs)
    if impl not in IMPLS:
        raise ConfigError(f"impl must be one of {', '.join(IMPLS)}, not {impl!r}")
    b, h, t, e = q.shape
    pat = _resolve(pattern, h)
    scale = e**-0.5 if scale is None else float(scale)
    if impl == "flex":
        if return_probs:
            raise ConfigError("impl='flex' cannot return probabilities; use impl='gather' or 'dense'")
        from .flex import flex_sparse_attention

        return flex_sparse_attention(q, k, v, pat, causal, scale, kernel_options)
    if impl == "auto" and not return_probs and _wants_flex(q):
        from .flex import try_flex

        out = try_flex(q, k, v, pat, causal, scale, kernel_options)  # None: compiling failed (warned once), gather instead
        if out is not None:
            return out
    outs: list[torch.Tensor] = []
    probs: list[torch.Tensor] = []
    order: list[int] = []
    groups = _groups(pat)
    split = None
    if [i for _, heads in groups for i in heads] == list(range(h)):
        # groups of consecutive heads in order: one split, whose backward writes each input's gradient
        # once (a slice per group would allocate a full-size gradient per group)
        sizes = [len(heads) for _, heads in groups]
        split = list(zip(*(torch.split(x, sizes, dim=1) for x in (q, k, v))))
    for n, (hp, heads) in enumerate(groups):
        if split is not None:
            qg, kg, vg = split[n]
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


def flex_plan(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", pattern: "Pattern | str | Any",
              causal: bool = True, scale: float | None = None) -> "FlexPlan | None":
    """The :class:`~attnscope.sparse.flex.FlexPlan` that ``impl="auto"`` runs these inputs with (kernel options
    as chosen for them), or None where it gathers instead (no CUDA, FlexAttention missing or failed). A model
    keeps it and calls :func:`~attnscope.sparse.flex.attend`, which torch.compile traces without a graph break."""
    if not _wants_flex(q):
        return None
    from .flex import options_for, plan

    pat = _resolve(pattern, q.shape[1])
    scale = q.shape[-1] ** -0.5 if scale is None else float(scale)
    options = options_for(q, k, v, pat, causal, scale)[0]
    return plan(pat, q.shape[2], causal, q.device, scale, compiled=q.device.type == "cuda", options=options)


def _check_inputs(q: "torch.Tensor", k: "torch.Tensor", v: "torch.Tensor", scale: Any, causal: Any,
                  return_probs: Any) -> None:
    """One sentence naming the argument for inputs the kernels would fail on (or compute nonsense from)."""
    import torch

    from attnscope.errors import check_type

    check_type(causal, bool, "causal", "True or False")  # causal="False" would be read as True
    check_type(return_probs, bool, "return_probs", "True or False")
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_type(x, torch.Tensor, name, "a torch.Tensor [b,h,t,e]")
    if q.dim() != 4 or k.shape != q.shape or v.dim() != 4 or v.shape[:3] != q.shape[:3]:
        raise ConfigError(f"sparse_attention wants q, k, v as [b,h,t,e] (k the shape of q, v the same b,h,t); "
                          f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}")
    if 0 in q.shape or v.shape[3] == 0:
        raise ConfigError(f"sparse_attention needs q, k, v with no empty axis [b,h,t,e]; got {tuple(q.shape)}, {tuple(v.shape)}")
    if not all(x.is_floating_point() for x in (q, k, v)):
        raise ConfigError(f"q, k and v must be floating point; got {q.dtype}, {k.dtype}, {v.dtype}")
    # under autocast mixed dtypes are expected (rotary positions turn bf16 q, k into float32 while v stays bf16)
    if len({q.dtype, k.dtype, v.dtype}) > 1 and not torch.is_autocast_enabled(q.device.type):
        raise ConfigError(f"q, k and v must share one dtype outside autocast; got {q.dtype}, {k.dtype}, {v.dtype}")
    if k.device != q.device or v.device != q.device:
        raise ConfigError(f"q, k and v must be on one device; got {q.device}, {k.device}, {v.device}")
    if scale is not None:  # any real number float() takes (numpy scalars, a 0-dim tensor), never a string or bool
        try:
            value = None if isinstance(scale, (str, bytes, bool)) else float(scale)
        except (TypeError, ValueError, RuntimeError):
            value = None
        if value is None or not math.isfinite(value):
            raise ConfigError(f"scale must be a finite number (None: e ** -0.5), not {scale!r}", params="scale")


def _resolve(pattern: "Pattern | str | Any", h: int) -> Pattern:
    """``pattern`` as a :class:`Pattern` of h heads (a preset name parsed once per process)."""
    return _cached_pattern(pattern, h, _file_stamp(pattern)) if isinstance(pattern, str) else load_pattern(pattern, n_heads=h)


def _wants_flex(q: "torch.Tensor") -> bool:
    """``impl="auto"`` tries FlexAttention on CUDA while it exists and has not failed to compile."""
    if q.device.type != "cuda":
        return False
    from .flex import usable

    return usable()
