"""Spectra of the symmetric and antisymmetric parts of W_qk, exactly, from the factors.

Einstein legend: n forms in a batch, h query head, g kv head, r query heads per group, d model dim,
e head dim, m = 2e (the stacked factors [Q K]), o offset.

For one head ``M = Q K^T`` (d x d; Q, K: d x e), the symmetric part ``S = (M + M^T)/2`` ("filtering",
Jamil & Kapadia 2026) and the antisymmetric part ``A = (M - M^T)/2`` ("routing") both live in
span[Q, K] (rank <= 2e). With ``F = [Q K]`` (d x 2e) and its Gram ``G = F^T F`` (2e x 2e):

    S = F B_s F^T,  B_s = [[0, I/2], [I/2, 0]]       A = F B_a F^T,  B_a = [[0, I/2], [-I/2, 0]]

Factor ``G = L L^T`` (Cholesky; eigen-decomposition ``V diag(l) V^T``, ``L = V diag(sqrt l)`` when G is
singular, as for Q = K or a zero head). Then ``F = U L^T`` with U orthonormal on span[Q, K], so
``S = U (L^T B_s L) U^T``: the nonzero eigenvalues of S are those of the small symmetric
``C_s = L^T B_s L``, and A's singular values those of the antisymmetric ``C_a = L^T B_a L`` (taken as
the square roots of the eigenvalues of ``C_a^T C_a``; they come in equal pairs). With L's rows split
as ``[L_q; L_k]`` (e rows each), ``C_s = (L_q^T L_k + L_k^T L_q)/2`` and ``C_a = (L_q^T L_k - L_k^T L_q)/2``.
G's blocks are the Grams the s, d kernel uses: ``A_h = Q^T Q``, ``B_g = K^T K`` (once per kv group),
``X = K^T Q``, as float32 products, in float64 for heads whose G is ill-conditioned (``_head_grams``
says why). No d x d matrix; per head O(d e^2) for the Grams and O(e^3) for the 2e x 2e problem, in
float64. At a rotary offset the form is ``Q G(o) K^T``, i.e. K rotated: ``B_o = G B G^T``, ``X_o = G X``
(:mod:`.rotary`), so every offset costs O(e^3) per head.

From a spectrum, per part (definitions in docs/geometry.md, "Spectra"):

* ``effective_rank``: Roy & Vetterli (2007), ``exp(H(p))`` with ``p_i = sigma_i / sum_j sigma_j`` over
  the singular values sigma of the part; in [1, 2e] for a nonzero part, 0 for a zero part;
* ``signature`` of S: ``sum(lambda) / sum|lambda|`` over S's eigenvalues, in [-1, 1] (= tr(M) / ||S||_*):
  +1 when S is positive semi-definite (the head's filtering matches like with like), -1 when
  negative (unlike with unlike), 0 for S = 0;
* ``top2``: the energy share ``(sigma_1^2 + sigma_2^2) / sum sigma^2`` of A's top two singular values
  (its leading rotation plane), 0 for A = 0.

Singular values below ``rtol * ||M||_F`` (``RTOL`` = 1e-6) count as zero: where span[Q, K] has fewer
than 2e dimensions the rounding of the (float64) Grams moves the zero singular values by ~sqrt(eps)
(~1e-8 relative), so an exactly symmetric head (Q = K) would otherwise show a noise spectrum as its
routing part. Cross-attention forms (d != c) have no symmetric part: NaN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np

from attnscope.families.rope import RotaryLayout

from .kernels import _as_f32, _check_factors, kernel_threads, layer_factors

__all__ = [
    "RTOL",
    "SPECTRA_COLUMNS",
    "Spectra",
    "head_spectra",
    "layer_spectra",
    "explicit_spectra",
    "spectra_from_grams",
    "effective_rank",
    "signature",
    "top_energy",
    "spectra_ref",
]

#: singular values below RTOL * ||M||_F are taken as zero (float32 noise; module docstring)
RTOL = 1e-6
#: the columns ``spectra=True`` adds to the score record
SPECTRA_COLUMNS = ("sym_rank", "anti_rank", "sym_signature", "anti_top2")


@dataclass(frozen=True)
class Spectra:
    """Spectra of the symmetric and antisymmetric parts of n forms."""

    sym: np.ndarray  # [n, m] float64, S's eigenvalues sorted by |value|, largest first (signed)
    anti: np.ndarray  # [n, m] float64, A's singular values, largest first (in equal pairs)
    frob: np.ndarray  # [n] float64, ||M||_F (the scale of the zero threshold)
    rtol: float = RTOL

    def _tol(self) -> np.ndarray:
        return (self.rtol * self.frob)[:, None]  # [n, 1]

    def _nan(self, v: np.ndarray) -> np.ndarray:
        """v with NaN where the form has no spectrum (cross-attention, non-finite weights)."""
        return np.where(np.isnan(self.frob), np.nan, v)

    @property
    def sym_values(self) -> np.ndarray:
        """[n, m] S's singular values |lambda| with the ones below the threshold set to 0."""
        v = np.abs(self.sym)
        return np.where(v > self._tol(), v, 0.0)

    @property
    def anti_values(self) -> np.ndarray:
        """[n, m] A's singular values with the ones below the threshold set to 0."""
        return np.where(self.anti > self._tol(), self.anti, 0.0)

    @property
    def sym_rank(self) -> np.ndarray:
        """[n] effective rank of S."""
        return self._nan(effective_rank(self.sym_values))

    @property
    def anti_rank(self) -> np.ndarray:
        """[n] effective rank of A."""
        return self._nan(effective_rank(self.anti_values))

    @property
    def sym_signature(self) -> np.ndarray:
        """[n] signature of S in [-1, 1]."""
        return self._nan(signature(np.where(np.abs(self.sym) > self._tol(), self.sym, 0.0)))

    @property
    def anti_top2(self) -> np.ndarray:
        """[n] energy share of A's top two singular values."""
        return self._nan(top_energy(self.anti_values, 2))

    def columns(self) -> dict[str, np.ndarray]:
        """{column: [n] values} of :data:`SPECTRA_COLUMNS`."""
        return {"sym_rank": self.sym_rank, "anti_rank": self.anti_rank, "sym_signature": self.sym_signature,
                "anti_top2": self.anti_top2}


# ---- scalar summaries of a spectrum (pure) ----------------------------------------------------


def effective_rank(values: np.ndarray) -> np.ndarray:
    """Roy & Vetterli's effective rank exp(-sum p log p), p = values / sum(values), along the last axis.

    values [..., m] >= 0 (singular values) -> [...] float64; 0 where every value is 0.
    """
    v = np.asarray(values, dtype=np.float64)
    tot = v.sum(axis=-1, keepdims=True)
    p = np.where(tot > 0, v / np.where(tot > 0, tot, 1.0), 0.0)
    h = -np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0).sum(axis=-1)
    return np.where(tot[..., 0] > 0, np.exp(h), 0.0)


def signature(eigenvalues: np.ndarray) -> np.ndarray:
    """sum(lambda) / sum|lambda| along the last axis, in [-1, 1]; 0 where every eigenvalue is 0."""
    lam = np.asarray(eigenvalues, dtype=np.float64)
    mass = np.abs(lam).sum(axis=-1)
    return np.clip(np.where(mass > 0, lam.sum(axis=-1) / np.where(mass > 0, mass, 1.0), 0.0), -1.0, 1.0)


def top_energy(values: np.ndarray, k: int = 2) -> np.ndarray:
    """Share of sum(values^2) in the k largest values along the last axis; 0 where every value is 0."""
    v2 = np.sort(np.asarray(values, dtype=np.float64) ** 2, axis=-1)[..., ::-1]
    tot = v2.sum(axis=-1)
    return np.where(tot > 0, v2[..., :k].sum(axis=-1) / np.where(tot > 0, tot, 1.0), 0.0)


# ---- the small problem --------------------------------------------------------------------------


def _gram_factor(gram: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(L with ``L L^T = gram`` for each PSD gram [n, m, m] (float64), [n] bool: well conditioned).

    Cholesky; the eigen route where it fails (singular). Well conditioned: Cholesky succeeded and its pivots
    L_ii^2 span at most :data:`PIVOT_LIMIT` (their ratio is a lower bound on cond G).
    """
    ok: np.ndarray = np.ones(len(gram), dtype=bool)
    try:
        out = np.linalg.cholesky(gram)
    except np.linalg.LinAlgError:
        out = np.empty_like(gram)
        for i, g in enumerate(gram):  # only the batch that failed pays; most heads still take Cholesky
            try:
                out[i] = np.linalg.cholesky(g)
            except np.linalg.LinAlgError:
                lam, vec = np.linalg.eigh(g)
                out[i] = vec * np.sqrt(np.maximum(lam, 0.0))[None, :]
                ok[i] = False
    piv = np.einsum("nii->ni", out) ** 2  # [n, m]
    return out, ok & (piv.min(axis=1) * PIVOT_LIMIT >= piv.max(axis=1))


def _by_magnitude(x: np.ndarray) -> np.ndarray:
    """x [n, m] sorted by |value| along the last axis, largest first."""
    return np.take_along_axis(x, np.argsort(-np.abs(x), axis=-1, kind="stable"), axis=-1)


def _balanced_gram(a: np.ndarray, b: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(G [n, m, m] float64 with Q scaled by c and K by 1/c so that tr A = tr B, ||M||_F [n]): M = (cQ)(K/c)^T
    for any c > 0, and balanced blocks keep either from being lost in the other's rounding."""
    a, b, x = (np.asarray(v, dtype=np.float64) for v in (a, b, x))
    n, e, _ = a.shape
    frob = np.sqrt(np.maximum(np.einsum("nij,nji->n", a, b), 0.0))  # ||M||_F^2 = tr(A B)
    ta, tb = np.einsum("nii->n", a), np.einsum("nii->n", b)
    c2 = np.where((ta > 0) & (tb > 0), np.sqrt(tb / np.where(ta > 0, ta, 1.0)), 1.0)[:, None, None]  # c^2
    gram = np.empty((n, 2 * e, 2 * e))  # [n, m, m]  G = [[Q^T Q, Q^T K], [K^T Q, K^T K]]
    gram[:, :e, :e], gram[:, e:, e:] = a * c2, b / c2
    gram[:, e:, :e], gram[:, :e, e:] = x, x.swapaxes(-1, -2)
    return gram, frob


def spectra_from_grams(a: np.ndarray, b: np.ndarray, x: np.ndarray, rtol: float = RTOL,
                       precise: "Callable[[np.ndarray], tuple[np.ndarray, ...]] | None" = None) -> Spectra:  # fmt: skip
    """Spectra of ``M_n = Q_n K_n^T`` from its Grams a = Q^T Q, b = K^T K, x = K^T Q (each [n, e, e]).

    The module docstring's 2e x 2e problem, in float64. ``precise(idx)``: the Grams of forms ``idx`` again,
    in float64, for the forms whose G is ill-conditioned (when a, b, x came from float32 products).
    Returns n spectra of m = 2e values.
    """
    gram, frob = _balanced_gram(a, b, x)
    e = gram.shape[1] // 2
    lo, ok = _gram_factor(gram)  # [n, m, m]
    if precise is not None and not ok.all():  # (nearly) rank-deficient span[Q, K]: float32 Grams are not enough
        idx = np.flatnonzero(~ok)
        gram_p, frob[idx] = _balanced_gram(*precise(idx))
        lo[idx] = _gram_factor(gram_p)[0]
    lq, lk = lo[:, :e, :], lo[:, e:, :]  # [n, e, m] rows of Q and of K
    cross = np.matmul(lq.swapaxes(-1, -2), lk)  # [n, m, m]  L_q^T L_k
    c_s = (cross + cross.swapaxes(-1, -2)) / 2
    c_a = (cross - cross.swapaxes(-1, -2)) / 2
    sym = _by_magnitude(np.linalg.eigvalsh(c_s))
    anti2 = np.linalg.eigvalsh(np.matmul(c_a.swapaxes(-1, -2), c_a))  # sigma^2, ascending
    anti = np.sqrt(np.maximum(anti2, 0.0))[:, ::-1]
    return Spectra(sym, np.ascontiguousarray(anti), frob, rtol)


#: heads whose Gram G (from float32 products) has Cholesky pivots L_ii^2 spanning more than this factor (a lower
#: bound on cond G) get float64 Grams (see :func:`_head_grams`)
PIVOT_LIMIT = 1e2


def _head_grams(q: np.ndarray, k: np.ndarray, dtype: type = np.float64) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A_h [h, e, e], B_g(h) [h, e, e], X_h = K_g^T Q_h [h, e, e]) as float64, products in ``dtype``, one kv
    group at a time.

    float32 products (4x faster here) carry a relative error of ~eps32 sqrt(cond G) into the spectra: fine
    for a well-conditioned G. Where span[Q, K] has fewer than 2e dimensions (Q = K, d < 2e) or nearly so,
    the small problem is (nearly) defective at 0 and a Gram error eps moves its zero singular values by
    ~sqrt(eps): :func:`head_spectra` recomputes such heads (pivots beyond :data:`PIVOT_LIMIT`) in float64.
    """
    h, g, r = _check_factors(q, k)
    e = q.shape[2]
    a = np.empty((h, e, e))
    b = np.empty((h, e, e))
    x = np.empty((h, e, e))
    for gi in range(g):
        kt = np.ascontiguousarray(k[gi].T, dtype=dtype)  # [e, d]
        qt = np.ascontiguousarray(q[gi * r : (gi + 1) * r].swapaxes(-1, -2), dtype=dtype)  # [r, e, d]
        b[gi * r : (gi + 1) * r] = kt @ kt.T  # B_g, shared by the group's r heads
        for j in range(r):
            a[gi * r + j] = qt[j] @ qt[j].T  # syrk
        x[gi * r : (gi + 1) * r] = (qt.reshape(r * e, -1) @ kt.T).reshape(r, e, e).swapaxes(-1, -2)  # X_h = K^T Q_h
    return a, b, x


def head_spectra(q: np.ndarray, k: np.ndarray, rtol: float = RTOL) -> Spectra:
    """Spectra of every head's ``M_h = q[h] @ k[h // (h/g)].T`` (q [h, d, e], k [g, d, e]), factored.

    NaN spectra for a non-square (cross-attention) form, d != c.
    """
    q, k = _as_f32(q), _as_f32(k)
    h, _, _ = _check_factors(q, k)
    e = q.shape[2]
    if q.shape[1] != k.shape[1]:
        return _nan_spectra(h, 2 * e, rtol)
    with kernel_threads():
        return spectra_from_grams(*_head_grams(q, k, np.float32), rtol, precise=_precise(q, k))


def spectra_with_grams(q: np.ndarray, k: np.ndarray, grams: "tuple[np.ndarray, np.ndarray, np.ndarray] | None",
                       rtol: float = RTOL) -> Spectra:  # fmt: skip
    """:func:`head_spectra` from the float32 Grams :func:`.kernels.head_stats_with_grams` computed already."""
    if grams is None:
        return head_spectra(q, k, rtol)
    q, k = _as_f32(q), _as_f32(k)
    with kernel_threads():
        a, b, x = grams
        return spectra_from_grams(a, b, x, rtol, precise=_precise(q, k))


def _precise(q: np.ndarray, k: np.ndarray) -> "Callable[[np.ndarray], tuple[np.ndarray, ...]]":
    """The float64 Grams of some heads of q [h, d, e], k [g, d, e] (their kv heads paired as h // (h/g))."""
    r = q.shape[0] // k.shape[0]

    def grams(idx: np.ndarray) -> tuple[np.ndarray, ...]:
        parts = [_head_grams(q[i : i + 1], k[i // r : i // r + 1]) for i in idx]
        return tuple(np.concatenate([p[j] for p in parts]) for j in range(3))

    return grams


def _nan_spectra(n: int, m: int, rtol: float) -> Spectra:
    return Spectra(np.full((n, m), np.nan), np.full((n, m), np.nan), np.full(n, np.nan), rtol)


def explicit_spectra(m: np.ndarray, rtol: float = RTOL) -> Spectra:
    """Spectra of explicit square forms m [n, d, d] (float32 or float64 in, float64 eigen-solvers)."""
    m = np.asarray(m, dtype=np.float64)
    if m.ndim == 2:
        m = m[None]
    if m.shape[-1] != m.shape[-2]:
        return _nan_spectra(m.shape[0], m.shape[-1], rtol)
    mt = m.swapaxes(-1, -2)
    sym = _by_magnitude(np.linalg.eigvalsh((m + mt) / 2))
    c_a = (m - mt) / 2
    anti = np.sqrt(np.maximum(np.linalg.eigvalsh(np.matmul(c_a.swapaxes(-1, -2), c_a)), 0.0))[:, ::-1]
    frob = np.sqrt(np.einsum("nij,nij->n", m, m))
    return Spectra(sym, np.ascontiguousarray(anti), frob, rtol)


def layer_spectra(q: np.ndarray, k: np.ndarray, *, method: str = "auto", rtol: float = RTOL) -> Spectra:
    """Spectra of the layer form ``M_L = sum_h M_h`` (n = 1).

    method "auto": factored (a 2r x 2r problem, r = g*e the layer factors' inner dim) when 2r < d,
    one explicit d x d eigenproblem otherwise; "factored" or "explicit" force a route (both exact).
    """
    qs, ks = layer_factors(q, k)
    d, rank = qs.shape
    if ks.shape[0] != d:
        return _nan_spectra(1, min(2 * rank, d), rtol)
    if method == "auto":
        method = "factored" if 2 * rank < d else "explicit"
    if method == "factored":
        return head_spectra(qs[None], ks[None], rtol)
    if method == "explicit":
        return explicit_spectra(np.matmul(qs, ks.T)[None], rtol)
    raise ValueError(f"method must be auto, factored or explicit, not {method!r}")


# ---- rotary offsets ---------------------------------------------------------------------------


def offset_head_spectra(q: np.ndarray, k: np.ndarray, layout: RotaryLayout, offsets: Iterable[int],
                        rtol: float = RTOL) -> list[Spectra]:  # fmt: skip
    """Spectra of every head's ``M_o,h = Q_h G(o) K_g^T`` per offset (one :class:`Spectra` each).

    The Grams are taken once; per offset ``B_o = G B G^T`` and ``X_o = G X`` (:mod:`.rotary`).
    """
    from .rotary import _angles, _rot, _sandwich

    q, k = _as_f32(q), _as_f32(k)
    h, _, _ = _check_factors(q, k)
    e = q.shape[2]
    if layout.e != e:
        raise ValueError(f"the rotary layout is for head dim {layout.e}, the factors have {e}")
    offsets = list(offsets)
    if q.shape[1] != k.shape[1]:
        return [_nan_spectra(h, 2 * e, rtol) for _ in offsets]
    s2 = layout.scale**2
    out = []
    with kernel_threads():
        a, b, x = _head_grams(q, k, np.float32)
        _, ok = _gram_factor(_balanced_gram(a, b, x)[0])  # a rotation of K leaves G's conditioning as it is
        if not ok.all():
            idx = np.flatnonzero(~ok)
            a[idx], b[idx], x[idx] = _precise(q, k)(idx)
        cos, sin = _angles(layout, offsets)  # [o, p]
        for i in range(len(offsets)):
            b_o = _sandwich(b, layout, cos[i], sin[i])  # [h, e, e]  G B G^T
            x_o = _rot(x, layout, cos[i], sin[i])  # [h, e, e]  G X
            sp = spectra_from_grams(a, b_o, x_o, rtol)
            out.append(Spectra(sp.sym * s2, sp.anti * s2, sp.frob * s2, rtol))
    return out


def offset_layer_spectra(q: np.ndarray, k: np.ndarray, layout: RotaryLayout, offsets: Iterable[int], *,
                         method: str = "auto", rtol: float = RTOL) -> list[Spectra]:  # fmt: skip
    """Spectra of the layer form ``M_L,o = sum_h Q_h G(o) K_g(h)^T`` per offset (n = 1 each); route as
    :func:`layer_spectra`, the layout tiled over the layer factors' g kv heads (as :mod:`.rotary`)."""
    from .rotary import _angles, _rot

    offsets = list(offsets)
    qs, ks = layer_factors(q, k)
    d, rank = qs.shape
    if ks.shape[0] != d:
        return [_nan_spectra(1, min(2 * rank, d), rtol) for _ in offsets]
    tiled = layout.tiled(rank // layout.e)
    if method == "auto":
        method = "factored" if 2 * rank < d else "explicit"
    if method == "factored":
        return offset_head_spectra(qs[None], ks[None], tiled, offsets, rtol)
    if method != "explicit":
        raise ValueError(f"method must be auto, factored or explicit, not {method!r}")
    cos, sin = _angles(tiled, offsets)
    s2 = tiled.scale**2
    out = []
    for i in range(len(offsets)):
        kst = _rot(ks.T.astype(np.float64), tiled, cos[i], sin[i])  # K_o^T = G K^T  [rank, d]
        sp = explicit_spectra((qs.astype(np.float64) @ kst)[None], rtol)
        out.append(Spectra(sp.sym * s2, sp.anti * s2, sp.frob * s2, rtol))
    return out


# ---- the slow reference (tests) -----------------------------------------------------------------


def spectra_ref(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S's eigenvalues sorted by |value| desc, A's singular values desc) of one explicit square matrix,
    straight from the definition in float64: eigvalsh((M + M^T)/2), svd((M - M^T)/2)."""
    m = np.asarray(m, dtype=np.float64)
    lam = np.linalg.eigvalsh((m + m.T) / 2)
    return lam[np.argsort(-np.abs(lam), kind="stable")], np.linalg.svd((m - m.T) / 2, compute_uv=False)

