"""The math of W_qk geometry: sufficient statistics of bilinear forms, and the scores built on them.

Einstein legend: h query head, g kv head (group), r query heads per group, d model dim (query side),
c model dim on the key side (= d except for some cross-attention), e head dim, n forms in a batch.

For one head, ``M_h = Q_h K_g^T`` (d x c, rows = query, columns = key) with ``Q_h [d, e]`` and
``K_g [c, e]``. Everything a score needs is computed from e x e Gram matrices, never from M itself
(Saponati et al. 2025; docs/geometry.md):

    ||M||_F^2   = tr((Q^T Q)(K^T K))      row norms^2 = diag(Q (K^T K) Q^T)
    tr(M M)     = tr((K^T Q)^2)            col norms^2 = diag(K (Q^T Q) K^T)

Matrix products run in float32 BLAS (the row/column quadratic forms too); traces are accumulated
in float64. The explicit route (materialise M, :func:`explicit_stats`) serves layer forms whose
inner dimension is not small against d; :func:`symmetry_ref` and :func:`directionality_ref` are
the slow definitions the tests compare against.

Threads: the factored kernel is many small BLAS calls (e x e outputs); a multithreaded BLAS spends
more time synchronising than computing on them, catastrophically so on a busy machine (measured:
15 ms vs 141 ms per Llama-3-8B head on 2 shared cores). :func:`head_stats` therefore runs its BLAS
calls single-threaded (``ATTNSCOPE_KERNEL_THREADS`` overrides; parallelism belongs to layers and
models, e.g. the zoo survey's workers). The explicit d x d product keeps the BLAS default.

Conventions: a zero matrix has symmetry 0 and directionality 0 (no structure; its frobenius_norm
of 0 tells it apart). Symmetry of a non-square form (cross-attention with d != c) is NaN.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from attnscope.families.base import kv_head_index

__all__ = [
    "FormStats",
    "head_stats",
    "layer_stats",
    "layer_factors",
    "explicit_stats",
    "symmetry",
    "directionality",
    "symmetry_ref",
    "directionality_ref",
    "layer_matrix",
]


@dataclass(frozen=True)
class FormStats:
    """What the scores need from a batch of n bilinear forms M_n (d x c each)."""

    frob2: np.ndarray  # [n] float64, ||M||_F^2
    trace_mm: np.ndarray  # [n] float64, tr(M M) = <M, M^T>_F (NaN when d != c)
    row_norms: np.ndarray  # [n, d] float64, ||M[i, :]||
    col_norms: np.ndarray  # [n, c] float64, ||M[:, j]||

    @property
    def symmetry(self) -> np.ndarray:
        """[n] symmetry scores."""
        return symmetry(self.trace_mm, self.frob2)

    def directionality(self, k: float = 2.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """[n] directionality scores, [n] outlier-row counts, [n] outlier-column counts."""
        return directionality(self.row_norms, self.col_norms, k)


def _as_f32(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    return a if a.dtype == np.float32 else a.astype(np.float32)


def _check_factors(q: np.ndarray, k: np.ndarray) -> tuple[int, int, int]:
    if q.ndim != 3 or k.ndim != 3:
        raise ValueError(f"factors must be q [h, d, e] and k [g, c, e], got {q.shape} and {k.shape}")
    if q.shape[2] != k.shape[2]:
        raise ValueError(f"q and k head dims differ: {q.shape} vs {k.shape}")
    h, g = q.shape[0], k.shape[0]
    kv_head_index(h, g)  # validates the grouping (one clear error)
    return h, g, h // g


_CONTROLLER: list = []  # one threadpoolctl controller per process (building one scans the loaded libraries)


@contextlib.contextmanager
def kernel_threads() -> Iterator[None]:
    """Limit BLAS to ``ATTNSCOPE_KERNEL_THREADS`` threads (default 1) inside the factored kernel."""
    n = os.environ.get("ATTNSCOPE_KERNEL_THREADS", "1")
    if n.strip().lower() in ("", "0", "default", "auto"):
        yield
        return
    if not _CONTROLLER:
        try:
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn
            _CONTROLLER.append(None)
        else:
            _CONTROLLER.append(ThreadpoolController())
    if _CONTROLLER[0] is None:  # pragma: no cover
        yield
        return
    with _CONTROLLER[0].limit(limits=int(n), user_api="blas"):
        yield


def head_stats(q: np.ndarray, k: np.ndarray) -> FormStats:
    """Per-head statistics of ``M_h = q[h] @ k[h // (h/g)].T``, factored (no d x c matrix).

    q [h, d, e], k [g, c, e] float32 -> FormStats with n = h. K^T K is computed once per kv group.
    """
    if q.shape[-1] > 256:  # large inner products (a layer form) are worth BLAS threads
        return _head_stats(q, k)
    with kernel_threads():
        return _head_stats(q, k)


def _blas_ready(f: np.ndarray) -> np.ndarray:
    """f itself when one of its two matrix axes is contiguous (BLAS reads it without a copy)."""
    if f.strides[-1] == f.itemsize or f.strides[-2] == f.itemsize:
        return f
    return np.ascontiguousarray(f)


def _expand(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """x broadcast to ``shape`` as an explicit view: numpy's matmul runs a broadcast size-1 batch
    axis through a slower loop (measured 1.8x on [g, 1, e, e] @ [g, r, e, d]), a stride-0 view not."""
    return np.broadcast_to(x, shape)


def _quad_diag(ft: np.ndarray, m: np.ndarray) -> np.ndarray:
    """diag(F M F^T) for ``ft = F^T`` [..., e, n] and symmetric M [..., e, e] -> [..., n] float32.

    One GEMM ``M @ F^T`` (inner dimension e) and one streaming pass, reading F in its given layout.
    """
    return np.einsum("...en,...en->...n", np.matmul(m, ft), ft)


def _grams(ft: np.ndarray) -> np.ndarray:
    """F^T F for each ``ft = F^T`` [n, e, d] -> [n, e, e] float32.

    One 2-D product per matrix: numpy sends ``x @ x.T`` to BLAS syrk, which computes one triangle
    (half the multiply-adds of the batched matmul, which does not take that route).
    """
    out = np.empty((ft.shape[0], ft.shape[1], ft.shape[1]), dtype=np.float32)
    for i, x in enumerate(ft):
        np.matmul(x, x.T, out=out[i])
    return out


def head_stats_with_grams(q: np.ndarray, k: np.ndarray) -> tuple[FormStats, tuple[np.ndarray, np.ndarray, np.ndarray] | None]:
    """:func:`head_stats` and the Grams it computed on the way, (A_h, B_g(h), X_h = K_g^T Q_h) [h, e, e] float32
    (None when d != c): the spectra (:mod:`.spectra`) start from them instead of computing them again."""
    out: list = []
    with kernel_threads():
        stats = _head_stats(q, k, out)
    return stats, (out[0] if out else None)


def _head_stats(q: np.ndarray, k: np.ndarray, grams: list | None = None) -> FormStats:
    q, k = _as_f32(q), _as_f32(k)
    h, g, r = _check_factors(q, k)
    _, d, e = q.shape
    c = k.shape[1]
    # Work on the transposed factors Q^T [e, d], K^T [e, c]: for nn.Linear weights ([(h e), d], the
    # usual source) these are contiguous views, for [h, d, e] arrays BLAS reads them transposed.
    # Per head ~3.5 d e^2 multiply-adds (the FLOP floor of the formulas): the Gram A_h by syrk
    # (0.5), X_h, Q_h B_g and A_h K_g^T by GEMM (1 each), K^T K once per group; the products that
    # share K_g run as one GEMM over the group's stacked heads. No d x c matrix, no copy of
    # nn.Linear weights. Traces and norms leave float32 only as e x e matrices or [d] vectors,
    # summed in float64.
    qt = _blas_ready(q.swapaxes(-1, -2)).reshape(g, r, e, d)  # [g, r, e, d]
    kt = _blas_ready(k.swapaxes(-1, -2))  # [g, e, c]
    a = _grams(qt.reshape(h, e, d)).reshape(g, r, e, e)  # [g, r, e, e]  A_h = Q_h^T Q_h
    b = _grams(kt)  # [g, e, e]     B_g = K_g^T K_g
    rows2 = _quad_diag(qt, _expand(b[:, None], (g, r, e, e))).reshape(h, d)  # diag(Q_h B_g Q_h^T)
    # diag(K_g A_h K_g^T) for a whole group: one GEMM [r e, e] x [e, c], then one streaming pass
    cols2 = np.einsum("gren,gen->grn", np.matmul(a.reshape(g, r * e, e), kt).reshape(g, r, e, c), kt).reshape(h, c)
    rows64 = rows2.astype(np.float64)
    # ||M||_F^2 = tr(A_h B_g), from the two Grams in float64 (e^2 per head): the same precision as
    # tr(X X) below, so s = tr(MM) / ||M||^2 keeps its exact cases (-1 for a skew form) to ~1e-7
    frob2 = np.einsum("grij,gji->gr", a.astype(np.float64), b.astype(np.float64)).reshape(h)
    if d == c:
        # X_h^T = Q_h^T K_g for a whole group in one GEMM [r e, d] x [d, e] (tr(X X) = tr(X^T X^T))
        xt = np.matmul(qt.reshape(g, r * e, d), kt.swapaxes(-1, -2)).reshape(g, r, e, e)  # X_h^T, float32
        x64 = xt.astype(np.float64)
        trace_mm = np.einsum("grij,grji->gr", x64, x64).reshape(h)  # tr(X X)
        if grams is not None:
            grams.append((a.reshape(h, e, e), np.repeat(b, r, axis=0), xt.reshape(h, e, e).swapaxes(-1, -2)))
    else:
        trace_mm = np.full(h, np.nan)
    return FormStats(frob2, trace_mm, _sqrt0(rows64), _sqrt0(cols2.astype(np.float64)))


def layer_factors(q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Factors of the layer form ``M_L = sum_h M_h`` with the smallest inner dimension.

    Query heads sharing a kv head add up first (``M_L = sum_g (sum_{h in g} Q_h) K_g^T``), so the
    inner dimension is g*e: below d for grouped-query attention.
    Returns qs [d, g*e], ks [c, g*e] float32 with ``M_L = qs @ ks.T``.
    """
    q, k = _as_f32(q), _as_f32(k)
    h, g, r = _check_factors(q, k)
    _, d, e = q.shape
    c = k.shape[1]
    qsum = q.reshape(g, r, d, e).sum(axis=1, dtype=np.float32) if r > 1 else q  # [g, d, e]
    qs = qsum.transpose(1, 0, 2).reshape(d, g * e)
    ks = k.transpose(1, 0, 2).reshape(c, g * e)
    return qs, ks


def layer_stats(q: np.ndarray, k: np.ndarray, *, method: str = "auto") -> FormStats:
    """Statistics of the layer form ``M_L = sum_h M_h`` (n = 1).

    method "auto": factored when the inner dimension r = g*e is at most min(d, c) / 5, one explicit
    d x c product otherwise (the factored route costs ~10 d r^2 flops, the explicit one ~2 d^2 r, so
    "rank below d" alone is not enough to win); "factored" or "explicit" force a route (both exact,
    the tests check they agree).
    """
    qs, ks = layer_factors(q, k)
    rank = qs.shape[1]
    if method == "auto":
        method = "factored" if 5 * rank <= min(qs.shape[0], ks.shape[0]) else "explicit"
    if method == "factored":
        return head_stats(qs[None], ks[None])
    if method == "explicit":
        return explicit_stats(np.matmul(qs, ks.T)[None])
    raise ValueError(f"method must be auto, factored or explicit, not {method!r}")


def layer_matrix(q: np.ndarray, k: np.ndarray, rows: int | None = None, cols: int | None = None) -> np.ndarray:
    """The explicit layer form ``M_L[:rows, :cols]`` (float32), e.g. the 50 x 50 block of the figures."""
    qs, ks = layer_factors(q, k)
    return np.matmul(qs[:rows], ks[:cols].T)


def explicit_stats(m: np.ndarray, tile: int = 512) -> FormStats:
    """Statistics of explicit forms m [n, d, c] (float32 or float64 in, float64 accumulation).

    No float64 copy of m: norms reduce with a float64 accumulator, and tr(M M) = <M, M^T> runs
    over tile x tile blocks so the transposed reads stay in cache.
    """
    m = np.asarray(m)
    if m.ndim == 2:
        m = m[None]
    n, d, c = m.shape
    rows2 = np.einsum("nij,nij->ni", m, m, dtype=np.float64)
    cols2 = np.einsum("nij,nij->nj", m, m, dtype=np.float64)
    frob2 = rows2.sum(axis=1)
    trace_mm = np.full(n, np.nan)
    if d == c:
        for b in range(n):
            tot = 0.0
            for i in range(0, d, tile):
                for j in range(0, d, tile):
                    blk, blk_t = m[b, i : i + tile, j : j + tile], m[b, j : j + tile, i : i + tile]
                    tot += float(np.einsum("ij,ji->", blk, blk_t, dtype=np.float64))
            trace_mm[b] = tot
    return FormStats(frob2, trace_mm, np.sqrt(rows2), np.sqrt(cols2))


def _sqrt0(x: np.ndarray) -> np.ndarray:
    """sqrt of squared norms that rounding may have pushed a hair below zero."""
    return np.sqrt(np.maximum(x, 0.0))


def symmetry(trace_mm: np.ndarray, frob2: np.ndarray) -> np.ndarray:
    """s = tr(M M) / ||M||_F^2 in [-1, 1]; 0 for the zero matrix (no warning)."""
    trace_mm = np.asarray(trace_mm, dtype=np.float64)
    frob2 = np.asarray(frob2, dtype=np.float64)
    safe = np.where(frob2 > 0, frob2, 1.0)
    s = np.where(frob2 > 0, trace_mm / safe, 0.0)
    s = np.where(np.isnan(trace_mm), np.nan, s)
    return np.clip(s, -1.0, 1.0)  # rounding can leave |s| a few ulps above 1


def _excess(norms: np.ndarray, k: float) -> tuple[np.ndarray, np.ndarray]:
    """Per form: sum of (norm - tau) over norms above tau = mean + k std (ddof 1), and their count."""
    n = norms.shape[-1]
    mean = norms.mean(axis=-1, keepdims=True)
    std = norms.std(axis=-1, ddof=1, keepdims=True) if n > 1 else np.zeros_like(mean)
    over = norms - (mean + k * std)
    mask = over > 0
    return np.where(mask, over, 0.0).sum(axis=-1), mask.sum(axis=-1)


def directionality(
    row_norms: np.ndarray, col_norms: np.ndarray, k: float = 2.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """d = (R - C) / (R + C) in [-1, 1] (0 when R + C = 0), plus outlier row and column counts.

    row_norms [n, d], col_norms [n, c] -> d [n], n_outlier_rows [n], n_outlier_cols [n].
    Negative d: a few dominant columns (keys), the decoder signature.
    """
    rows = np.atleast_2d(np.asarray(row_norms, dtype=np.float64))
    cols = np.atleast_2d(np.asarray(col_norms, dtype=np.float64))
    big_r, n_r = _excess(rows, k)
    big_c, n_c = _excess(cols, k)
    tot = big_r + big_c
    d = np.where(tot > 0, (big_r - big_c) / np.where(tot > 0, tot, 1.0), 0.0)
    return d, n_r, n_c


# ---- explicit slow references (tests and the benchmark's "paper" baseline) -------------------


def symmetry_ref(m: np.ndarray) -> float:
    """s(M) = sum_ij M_ij M_ji / sum_ij M_ij^2 on an explicit square matrix (0 for M = 0)."""
    m = np.asarray(m, dtype=np.float64)
    num, den = float((m * m.T).sum()), float((m * m).sum())
    return num / den if den > 0 else 0.0


def directionality_ref(m: np.ndarray, k: float = 2.0) -> float:
    """d(M) straight from the definition: row/column norms, thresholds mean + k std (N-1)."""
    m = np.asarray(m, dtype=np.float64)
    r = np.linalg.norm(m, axis=1)
    c = np.linalg.norm(m, axis=0)
    tr, tc = r.mean() + k * r.std(ddof=1), c.mean() + k * c.std(ddof=1)
    big_r = sum(x - tr for x in r if x > tr)
    big_c = sum(x - tc for x in c if x > tc)
    return (big_r - big_c) / (big_r + big_c) if big_r + big_c > 0 else 0.0
