"""The bilinear form of a rotary head at a relative offset, scored factored; per-pair frequency usage.

Einstein legend: o offset, g kv head, r query heads per group, h query head, d model dim (query
side), c model dim (key side), e head dim, p rotary pair.

A rotary model rotates each pair (a, b) of q at position m by m*w and of k at position n by n*w
(:mod:`attnscope.families.rope`). With attnscope's row-vector factors (``q = x Q``) the logit is

    q_m . k_n = Re(z_q conj(z_k) e^{i (m - n) w})   per pair (z = x_a + i x_b)
              = x_m Q G(o) K^T x_n^T,   o = m - n (query position - key position)

with ``G(o)`` the identity on unrotated dims and, on each pair, ``[[cos, sin], [-sin, cos]]`` of
``o * w`` (rows a, b). So ``M_o = Q G(o) K^T = Q K_o^T`` with ``K_o = K G(o)^T``, and every statistic
of :mod:`.kernels` follows from rotated e x e matrices (G applied as 2 x 2 blocks, O(e^2) each):

    B_o = K_o^T K_o = G B G^T      ||M_o||^2 = tr(A B_o)        tr(M_o M_o) = tr((G X)^2), X = K^T Q
    row norms^2 = diag(Q B_o Q^T)   col norms^2 = diag(K (G^T A G) K^T)

The Grams A = Q^T Q, B = K^T K and X are computed once per layer; per offset the symmetry costs
O(e^2) per head, the row and column norms (directionality) one [d, e] x [e, e] product each, batched
over offsets. No d x c matrix is formed except by the explicit references (:func:`offset_form`).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

from attnscope.families.rope import RotaryLayout

from .kernels import FormStats, _as_f32, _check_factors, _grams, explicit_stats, kernel_threads, layer_factors

__all__ = ["rotation_matrix", "offset_form", "offset_head_stats", "offset_symmetry", "offset_layer_stats", "pair_usage"]

#: float32 elements per batched product of the norm passes (bounds memory: ~64 MiB)
_CHUNK_ELEMENTS = 1 << 24


def _angles(layout: RotaryLayout, offsets: Iterable[int]) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin [o, p] (float64) of offset * inv_freq."""
    ang = np.asarray(list(offsets), dtype=np.float64)[:, None] * layout.inv_freq[None, :]
    return np.cos(ang), np.sin(ang)


def rotation_matrix(layout: RotaryLayout, offset: int) -> np.ndarray:
    """The explicit G(offset) [e, e] (float64) with ``M_offset = Q G K^T`` (tests and references)."""
    g = np.eye(layout.e)
    c, s = (v[0] for v in _angles(layout, [offset]))
    a, b = layout.a, layout.b
    g[a, a], g[b, b], g[a, b], g[b, a] = c, c, s, -s
    return g * layout.scale**2


def _rot(x: np.ndarray, layout: RotaryLayout, c: np.ndarray, s: np.ndarray) -> np.ndarray:
    """G x along axis -2 (x [..., e, m]; c, s broadcastable to [..., p]); a new array."""
    c, s = c[..., None], s[..., None]
    xa, xb = x[..., layout.a, :], x[..., layout.b, :]
    out = np.array(np.broadcast_to(x, np.broadcast_shapes(x.shape, c.shape[:-2] + x.shape[-2:])))
    out[..., layout.a, :] = c * xa + s * xb
    out[..., layout.b, :] = c * xb - s * xa
    return out


def _sandwich(m: np.ndarray, layout: RotaryLayout, c: np.ndarray, s: np.ndarray) -> np.ndarray:
    """G m G^T for symmetric-or-not m [..., e, e] (G m, then G applied to the columns)."""
    return _rot(_rot(m, layout, c, s).swapaxes(-1, -2), layout, c, s).swapaxes(-1, -2)


def offset_form(q: np.ndarray, k: np.ndarray, layout: RotaryLayout, offset: int) -> np.ndarray:
    """The explicit form ``M_o = Q G(o) K^T`` [d, c] (float64) of one head: the slow reference."""
    return np.asarray(q, np.float64) @ rotation_matrix(layout, offset) @ np.asarray(k, np.float64).T


def _chunks(n: int, per_offset: int) -> Iterable[slice]:
    step = max(1, _CHUNK_ELEMENTS // max(per_offset, 1))
    for start in range(0, n, step):
        yield slice(start, min(n, start + step))


def offset_head_stats(q: np.ndarray, k: np.ndarray, layout: RotaryLayout, offsets: Iterable[int]) -> list[FormStats]:
    """Per-head statistics of ``M_o,h = Q_h G(o) K_g(h)^T`` for each offset, factored (one FormStats per offset).

    q [h, d, e], k [g, c, e]; layout.e == e. Offset 0 gives the unrotated form (to rounding).
    """
    with kernel_threads():
        return _offset_head_stats(q, k, layout, list(offsets))


def _offset_head_stats(q: np.ndarray, k: np.ndarray, layout: RotaryLayout, offsets: list[int]) -> list[FormStats]:
    q, k = _as_f32(q), _as_f32(k)
    h, g, r = _check_factors(q, k)
    _, d, e = q.shape
    c = k.shape[1]
    if layout.e != e:
        raise ValueError(f"the rotary layout is for head dim {layout.e}, the factors have {e}")
    qt = np.ascontiguousarray(q.swapaxes(-1, -2)).reshape(g, r, e, d)  # [g, r, e, d]
    kt = np.ascontiguousarray(k.swapaxes(-1, -2))  # [g, e, c]
    a = _grams(qt.reshape(h, e, d)).reshape(g, r, e, e).astype(np.float64)  # A_h = Q_h^T Q_h
    b = _grams(kt).astype(np.float64)  # [g, e, e]  B_g = K_g^T K_g
    # [g, r, e, e]  X_h = K_g^T Q_h
    x = np.einsum("gec,grfc->gref", kt, qt, optimize=True).astype(np.float64) if d == c else None
    cos, sin = _angles(layout, offsets)  # [o, p]
    s4 = layout.scale**4
    qgroups = qt.transpose(0, 2, 1, 3).reshape(g, e, r * d)  # [g, e, (r d)] for one GEMM per group
    out_rows = np.empty((len(offsets), h, d))
    out_cols = np.empty((len(offsets), h, c))
    frob2 = np.empty((len(offsets), h))
    trace = np.full((len(offsets), h), np.nan)
    for sl in _chunks(len(offsets), e * max(r * d, r * c)):
        cs, sn = cos[sl, None, :], sin[sl, None, :]  # [o, 1, p]
        b_o = _sandwich(b[None], layout, cs, sn)  # [o, g, e, e]
        at_o = _sandwich(a[None], layout, cs[..., None, :], -sn[..., None, :])  # [o, g, r, e, e]  G^T A G
        frob2[sl] = np.einsum("grij,ogji->ogr", a, b_o).reshape(-1, h) * s4
        if x is not None:
            gx = _rot(x[None], layout, cs[..., None, :], sn[..., None, :])  # [o, g, r, e, e]  G X
            trace[sl] = np.einsum("ogrij,ogrji->ogr", gx, gx).reshape(-1, h) * s4
        b32, at32 = b_o.astype(np.float32), at_o.astype(np.float32)
        n_o = b32.shape[0]
        for gi in range(g):
            # rows: diag(Q_h B_o Q_h^T) for the group's r heads and all offsets of the chunk, one GEMM
            prod = np.matmul(b32[:, gi].reshape(n_o * e, e), qgroups[gi]).reshape(n_o, e, r, d)
            rows = np.einsum("oerd,erd->ord", prod, qgroups[gi].reshape(e, r, d))
            out_rows[sl, gi * r : (gi + 1) * r] = rows
            # columns: diag(K_g (G^T A_h G) K_g^T), one GEMM over (offsets, heads)
            prod = np.matmul(at32[:, gi].reshape(n_o * r * e, e), kt[gi]).reshape(n_o, r, e, c)
            out_cols[sl, gi * r : (gi + 1) * r] = np.einsum("orec,ec->orc", prod, kt[gi])
    s2 = layout.scale**2
    return [FormStats(frob2[i], trace[i], np.sqrt(np.maximum(out_rows[i], 0.0)) * s2,
                      np.sqrt(np.maximum(out_cols[i], 0.0)) * s2) for i in range(len(offsets))]  # fmt: skip


def offset_symmetry(q: np.ndarray, k: np.ndarray, layout: RotaryLayout, offsets: Iterable[int]) -> np.ndarray:
    """Symmetry s of every head's ``M_o`` at every offset, [o, h], as quadratic forms in ``z = e^{i o w}`` [p].

    No row/column norms (so no directionality): the cheap route for dense offset sweeps. With
    ``U = Q_a + i Q_b``, ``V = K_a + i K_b`` (d x p, complex) and ``W = Q_u K_u^T`` (unrotated dims),
    ``M_o = Re(U diag(z) V^H) + W``; so ``||M_o||^2`` and ``tr(M_o M_o)`` are sums of Hermitian and
    bilinear forms in z with p x p coefficient matrices taken from the Grams (see docs/geometry.md),
    evaluated for all offsets by [o, p] x [p, p] products. q [h, d, e], k [g, d, e].
    """
    q, k = _as_f32(q), _as_f32(k)
    h, g, r = _check_factors(q, k)
    _, d, e = q.shape
    qt = np.ascontiguousarray(q.swapaxes(-1, -2))  # [h, e, d]
    kt = np.ascontiguousarray(k.swapaxes(-1, -2))  # [g, e, d]
    kv = np.arange(h) // r
    with kernel_threads():
        a = _grams(qt).astype(np.float64)  # [h, e, e]
        b = _grams(kt).astype(np.float64)[kv]  # [h, e, e]
        x = np.einsum("hec,hfc->hef", kt[kv], qt, optimize=True).astype(np.float64)  # X = K^T Q
    ia, ib, iu = layout.a, layout.b, layout.unrotated

    def blk(m: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
        return m[:, rows][:, :, cols]

    def cplx(m: np.ndarray, sa: int, sb: int) -> np.ndarray:
        """``L^T R`` for L = F_a + i sa F_b, R = F'_a + i sb F'_b, given m = F^T F' (per head): p x p complex."""
        return blk(m, ia, ia) - sa * sb * blk(m, ib, ib) + 1j * (sb * blk(m, ia, ib) + sa * blk(m, ib, ia))

    g_u, g_v = cplx(a, -1, 1), cplx(b, -1, 1)  # U^H U, V^H V
    s_u, s_v = cplx(a, 1, 1), np.conj(cplx(b, 1, 1))  # U^T U, conj(V^T V)
    c_vu, e_vu = cplx(x, -1, 1), cplx(x, -1, -1)  # V^H U, V^H conj(U)
    frob_h, frob_b = g_u * g_v.swapaxes(-1, -2), s_u * s_v.swapaxes(-1, -2)
    tr_b, tr_m = c_vu * c_vu.swapaxes(-1, -2), e_vu * np.conj(e_vu).swapaxes(-1, -2)
    # unrotated dims: the cross terms are linear in z, their own block constant
    lin_f = np.einsum("hpu,hup->hp", blk(b, ia, iu) - 1j * blk(b, ib, iu), blk(a, iu, ia) + 1j * blk(a, iu, ib))
    lin_t = np.einsum("hpu,hup->hp", blk(x, ia, iu) - 1j * blk(x, ib, iu), blk(x, iu, ia) + 1j * blk(x, iu, ib))
    const_f = np.einsum("hij,hji->h", blk(a, iu, iu), blk(b, iu, iu))
    const_t = np.einsum("hij,hji->h", blk(x, iu, iu), blk(x, iu, iu))
    offsets = list(offsets)
    out = np.empty((len(offsets), h))
    for sl in _chunks(len(offsets), 4 * h * layout.n_pairs):
        z = np.exp(1j * np.asarray(offsets[sl], dtype=np.float64)[:, None] * layout.inv_freq[None, :])  # [o, p]
        zc = np.conj(z)
        frob = 0.5 * (np.einsum("op,hop->ho", z, zc @ frob_h).real + np.einsum("op,hop->ho", z, z @ frob_b).real)
        frob += 2 * (lin_f @ z.T).real + const_f[:, None]
        tr = 0.5 * (np.einsum("op,hop->ho", z, z @ tr_b).real + np.einsum("op,hop->ho", zc, z @ tr_m).real)
        tr += 2 * (lin_t @ z.T).real + const_t[:, None]
        # (the attention factor scales both traces alike: s does not depend on it)
        out[sl] = np.clip(np.where(frob > 0, tr / np.where(frob > 0, frob, 1.0), 0.0), -1.0, 1.0).T
    return out


def offset_layer_stats(
    q: np.ndarray, k: np.ndarray, layout: RotaryLayout, offsets: Iterable[int], *, method: str = "auto"
) -> list[FormStats]:
    """Statistics of the layer form ``M_L,o = sum_h Q_h G(o) K_g(h)^T`` per offset (n = 1 each).

    Every head of a layer shares G, so the layer's factors (:func:`.kernels.layer_factors`, inner dim
    g*e) rotate with the layout tiled over the g kv heads. Route as :func:`.kernels.layer_stats`.
    """
    offsets = list(offsets)
    qs, ks = layer_factors(q, k)
    tiled = layout.tiled(ks.shape[1] // layout.e)
    rank = qs.shape[1]
    if method == "auto":
        method = "factored" if 5 * rank <= min(qs.shape[0], ks.shape[0]) else "explicit"
    if method == "factored":
        return offset_head_stats(qs[None], ks[None], tiled, offsets)
    if method != "explicit":
        raise ValueError(f"method must be auto, factored or explicit, not {method!r}")
    cos, sin = _angles(tiled, offsets)
    out = []
    for i in range(len(offsets)):
        kst = _rot(ks.T.astype(np.float64), tiled, cos[i], sin[i]).astype(np.float32)  # K_o^T = G K^T
        st = explicit_stats(np.matmul(qs, kst)[None])
        s2 = tiled.scale**2
        out.append(FormStats(st.frob2 * s2**2, st.trace_mm * s2**2, st.row_norms * s2, st.col_norms * s2))
    return out


def pair_usage(q: np.ndarray, k: np.ndarray, layout: RotaryLayout) -> dict[str, np.ndarray]:
    """Per head and rotary pair: the energy ``||Q_h[:, P] K_g[:, P]^T||_F^2`` of the pair's block and its symmetry.

    q [h, d, e], k [g, c, e] -> ``energy`` [h, p + 1] (the last column: all unrotated dims as one block,
    0 when every dim rotates), ``share`` (energy over its row's sum), ``symmetry`` [h, p + 1] (NaN for an
    empty block or d != c). From e x e Grams: tr(A_P B_P) and tr((X_P)^2), with P the block's columns.
    """
    q, k = _as_f32(q), _as_f32(k)
    h, g, r = _check_factors(q, k)
    kv = np.arange(h) // r
    qt = np.ascontiguousarray(q.swapaxes(-1, -2))  # [h, e, d]
    kt = np.ascontiguousarray(k.swapaxes(-1, -2))  # [g, e, c]
    a = _grams(qt).astype(np.float64)  # [h, e, e]
    b = _grams(kt).astype(np.float64)[kv]  # [h, e, e]
    x = np.einsum("hec,hfc->hef", kt[kv], qt).astype(np.float64) if q.shape[1] == k.shape[1] else None
    blocks = [np.array([i, j]) for i, j in zip(layout.a, layout.b)] + [layout.unrotated]
    energy = np.zeros((h, len(blocks)))
    sym = np.full((h, len(blocks)), np.nan)
    for j, idx in enumerate(blocks):
        if idx.size == 0:
            continue
        sub = np.ix_(np.arange(h), idx, idx)
        energy[:, j] = np.einsum("hij,hji->h", a[sub], b[sub])
        if x is not None:
            tr = np.einsum("hij,hji->h", x[sub], x[sub])
            sym[:, j] = np.where(energy[:, j] > 0, tr / np.where(energy[:, j] > 0, energy[:, j], 1.0), 0.0)
    tot = energy.sum(axis=1, keepdims=True)
    share = np.where(tot > 0, energy / np.where(tot > 0, tot, 1.0), 0.0)
    return {"energy": energy, "share": share, "symmetry": np.clip(sym, -1.0, 1.0)}
