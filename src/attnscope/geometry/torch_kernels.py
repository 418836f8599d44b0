"""The factored W_qk scores in torch, on the tensors' own device (the trainer's live-weight logging).

Same math and conventions as :mod:`.kernels` (whose numpy path stays the one for files and the zoo):
per head ``M_h = Q_h K_g^T`` is never formed; its statistics come from e x e Gram matrices

    row norms^2 = diag(Q B Q^T), B = K^T K      col norms^2 = diag(K A K^T), A = Q^T Q
    ||M||_F^2   = sum of row norms^2            tr(M M)     = tr((Q^T K)^2)

and the layer form ``M_L = sum_h M_h`` takes the factored route when its inner dimension g*e is at
most min(d, c) / 5, the explicit d x c product otherwise (the numpy kernel's rule). Products run in
float32; squared norms and traces are reduced in float64 (float32 on MPS, which has no float64).
Directionality thresholds are computed here too, so a whole model's scores leave the device as one
small tensor: no weight is copied to the host.

Einstein legend: L layers, h query heads, g kv heads, r = h / g, d model dim, e head dim.
"""

from __future__ import annotations

import torch

__all__ = ["head_stats", "layer_stats", "form_scores", "qk_scores"]

#: columns of the rows :func:`form_scores` returns
SCORE_FIELDS = ("symmetry", "directionality", "frobenius_norm", "n_outlier_rows", "n_outlier_cols")


def _acc(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64


def _check(q: torch.Tensor, k: torch.Tensor) -> tuple[int, int]:
    if q.dim() != 3 or k.dim() != 3 or q.shape[2] != k.shape[2]:
        raise ValueError(f"factors must be q [h, d, e] and k [g, c, e], got {tuple(q.shape)} and {tuple(k.shape)}")
    h, g = q.shape[0], k.shape[0]
    if g == 0 or h % g:
        raise ValueError(f"{h} query heads cannot share {g} kv heads")
    return h, g


def head_stats(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(frob2 [h], trace_mm [h], row_norms [h, d], col_norms [h, c]) of ``M_h = q[h] @ k[h // r].T``.

    q [h, d, e], k [g, c, e] on one device; trace_mm is NaN when d != c. Factored: no d x c matrix.
    """
    h, g = _check(q, k)
    acc = _acc(q.device)
    q, k = q.float(), k.float()
    r, d, c = h // g, q.shape[1], k.shape[1]
    qt = q.transpose(1, 2)  # [h, e, d] (a contiguous view for nn.Linear weights)
    kt = k.transpose(1, 2).repeat_interleave(r, dim=0) if r > 1 else k.transpose(1, 2)  # [h, e, c]
    a = qt @ qt.transpose(1, 2)  # [h, e, e]  A_h = Q_h^T Q_h
    b = kt @ kt.transpose(1, 2)  # [h, e, e]  B_g = K_g^T K_g
    rows2 = ((b @ qt) * qt).sum(1, dtype=acc)  # [h, d]  diag(Q B Q^T)
    cols2 = ((a @ kt) * kt).sum(1, dtype=acc)  # [h, c]  diag(K A K^T)
    frob2 = rows2.sum(1)  # [h]
    if d == c:
        x = (qt @ kt.transpose(1, 2)).to(acc)  # [h, e, e]  X^T = Q^T K
        trace_mm = (x * x.transpose(1, 2)).sum((1, 2))  # tr(X X)
    else:
        trace_mm = torch.full((h,), float("nan"), dtype=acc, device=q.device)
    return frob2, trace_mm, rows2.clamp_min(0).sqrt(), cols2.clamp_min(0).sqrt()


def layer_stats(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The :func:`head_stats` tuple (n = 1) of the layer form ``M_L = sum_h M_h``."""
    h, g = _check(q, k)
    d, e = q.shape[1], q.shape[2]
    c = k.shape[1]
    qs = q.float().reshape(g, h // g, d, e).sum(1).transpose(0, 1).reshape(d, g * e)  # [d, g e]
    ks = k.float().transpose(0, 1).reshape(c, g * e)  # [c, g e]
    if 5 * g * e <= min(d, c):
        return head_stats(qs[None], ks[None])
    acc = _acc(q.device)
    m = qs @ ks.T  # [d, c] float32
    m2 = m * m
    rows2, cols2 = m2.sum(1, dtype=acc), m2.sum(0, dtype=acc)
    trace_mm = (m * m.T).sum(dtype=acc) if d == c else torch.tensor(float("nan"), dtype=acc, device=m.device)
    return rows2.sum()[None], trace_mm[None], rows2.sqrt()[None], cols2.sqrt()[None]


def _excess(norms: torch.Tensor, k: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Per form: sum of (norm - tau) over the norms above tau = mean + k std (ddof 1), and their count."""
    mean = norms.mean(-1, keepdim=True)
    std = norms.std(-1, correction=1, keepdim=True) if norms.shape[-1] > 1 else torch.zeros_like(mean)
    over = norms - (mean + k * std)
    mask = over > 0
    return torch.where(mask, over, 0).sum(-1), mask.sum(-1).to(norms.dtype)


def form_scores(stats: tuple[torch.Tensor, ...], k: float = 2.0) -> torch.Tensor:
    """[n, 5] scores (:data:`SCORE_FIELDS`) of n forms from their :func:`head_stats` tuple.

    symmetry tr(MM)/||M||^2 clipped to [-1, 1] (0 for M = 0, NaN when not square), directionality
    (R - C)/(R + C) (0 when both are 0), ||M||_F and the outlier-row and -column counts.
    """
    frob2, trace_mm, rows, cols = stats
    sym = torch.where(frob2 > 0, trace_mm / torch.where(frob2 > 0, frob2, 1), 0).clamp(-1, 1)
    sym = torch.where(trace_mm.isnan(), trace_mm, sym)
    big_r, n_r = _excess(rows, k)
    big_c, n_c = _excess(cols, k)
    tot = big_r + big_c
    dirs = torch.where(tot > 0, (big_r - big_c) / torch.where(tot > 0, tot, 1), 0)
    return torch.stack([sym, dirs, frob2.sqrt(), n_r, n_c], dim=1)


def qk_scores(layers: list[tuple[torch.Tensor, torch.Tensor]], k: float = 2.0) -> torch.Tensor:
    """Scores of every head and the layer form of each (q [h, d, e], k [g, c, e]) layer: [L, h + 1, 5].

    Row h of a layer is its layer form. A head whose q or k holds a non-finite value scores NaN, and so
    does its layer (as ``attnscope geometry`` does); the other heads are scored as usual. Nothing
    leaves the device; the caller moves the one small result.
    """
    out = []
    for q, kk in layers:
        h, g = _check(q, kk)
        bad_k = ~torch.isfinite(kk).flatten(1).all(1)  # [g]
        bad = ~torch.isfinite(q).flatten(1).all(1) | bad_k.repeat_interleave(h // g)  # [h]
        q = torch.where(bad[:, None, None], 0, q.nan_to_num())  # score the rest on zeroed copies
        kk = torch.where(bad_k[:, None, None], 0, kk.nan_to_num())
        heads = form_scores(head_stats(q, kk), k)  # [h, 5]
        layer = form_scores(layer_stats(q, kk), k)  # [1, 5]
        nan = torch.tensor(float("nan"), dtype=heads.dtype, device=heads.device)
        heads = torch.where(bad[:, None], nan, heads)
        layer = torch.where(bad.any(), nan, layer)
        out.append(torch.cat([heads, layer]))
    return torch.stack(out)
