"""Numba kernels: the mean-field map and its tangent map, a time loop per parameter value, run in
parallel over the batch (``prange``), with the observables of a sweep accumulated on the fly.

Owns the fast path only; the readable reference is :mod:`attnscope.dynamics.meanfield` and the two are
tested to agree to 1e-12 over short horizons. Arrays follow the same layout (see that module):
U [K', M], Cf [4, M, K'], pos [4, C, M], mv/mk [B, C, M], A [B, M]. The tangent state of one value is
flattened as (dmv [C*M], dmk [C*M], dA [M]), D = 2CM + M.

The map is written once per layout: :func:`_step1`/:func:`_tangent1` for one value (``run_batch``,
``lyapunov_batch``: a time loop per value) and :func:`_step_inner` batch-innermost (mv/mk [C, M, B],
A [M, B]; ``run_batch_inner``, ``lyapunov_batch_inner``: a time loop per contiguous part of the batch,
inner loops over its values for SIMD; its tangent map is written inline in its only user,
``lyapunov_batch_inner``).

Legend: b batch element, a matrix (o v q k = 0 1 2 3), m/c features, k column group, s slot.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange


@njit(cache=True, inline="always")
def _step1(U, Cf, pos, beta, g, eps, mv, mk, A, t, T, m, mo, p):
    """One step of one value in place (mv, mk [C,M], A [M]); fills T [K'], m [4,M], mo [M], p [C]."""
    C, M = mv.shape
    Kp = U.shape[0]
    for k in range(Kp):
        z = 0.0
        for c in range(M):
            z += U[k, c] * A[c]
        T[k] = math.tanh(beta * z)
    phi = t % C
    for a in range(4):
        for b in range(M):
            acc = 0.0
            for k in range(Kp):
                acc += Cf[a, b, k] * T[k]
            if a == 0:
                mo[b] = acc
            m[a, b] = (1.0 - eps) * acc + eps * pos[a, phi, b]
    for c in range(M):
        mv[phi, c] = m[1, c]
        mk[phi, c] = m[3, c]
    n = t + 1 if t + 1 < C else C
    smax = -np.inf
    for s in range(n):
        acc = 0.0
        for c in range(M):
            acc += m[2, c] * mk[s, c]
        p[s] = g * acc
        if p[s] > smax:
            smax = p[s]
    tot = 0.0
    for s in range(n):
        p[s] = math.exp(p[s] - smax)
        tot += p[s]
    for s in range(n):
        p[s] /= tot
    for c in range(M):
        acc = 0.0
        for s in range(n):
            acc += p[s] * mv[s, c]
        A[c] = acc
    return n


@njit(cache=True, inline="always")
def _tangent1(U, Cf, beta, g, eps, mv, mk, t, n, T, m, p, x, dT, dm, ds):
    """Push one tangent vector x [D] through the step just taken (uses T, m, p, window after it)."""
    C, M = mv.shape
    Kp = U.shape[0]
    CM = C * M
    oA = 2 * CM
    phi = t % C
    for k in range(Kp):
        z = 0.0
        for c in range(M):
            z += U[k, c] * x[oA + c]
        dT[k] = (1.0 - T[k] * T[k]) * beta * z
    for a in range(1, 4):
        for b in range(M):
            acc = 0.0
            for k in range(Kp):
                acc += Cf[a, b, k] * dT[k]
            dm[a, b] = (1.0 - eps) * acc
    for c in range(M):
        x[phi * M + c] = dm[1, c]
        x[CM + phi * M + c] = dm[3, c]
    sbar = 0.0
    for s in range(n):
        acc = 0.0
        for c in range(M):
            acc += dm[2, c] * mk[s, c] + m[2, c] * x[CM + s * M + c]
        ds[s] = g * acc
        sbar += p[s] * ds[s]
    for c in range(M):
        acc = 0.0
        for s in range(n):
            acc += p[s] * (ds[s] - sbar) * mv[s, c] + p[s] * x[s * M + c]
        x[oA + c] = acc


@njit(cache=True, inline="always")
def _step_inner(U, Cf, pos, be, gg, ee, one_m_e, mv, mk, A, t, a0, nb, T, z, mm, sc, mx, tot):
    """:func:`_step1` for the nb values of one part, batch-innermost, in place (mv, mk [C,M,nb], A [M,nb]).

    Every inner loop runs over the batch (j), so LLVM can vectorise across values. Fills T [K',nb],
    mm [4,M,nb] for matrices a0..3 (mm[0] = mo, unmixed; mm[2] = the mixed query; a0 = 1 skips mo),
    sc [C,nb] = the softmax weights p of the first n slots; z, mx, tot [nb] are scratch. Returns n.
    nb is the caller's (hi - lo), not A.shape[1]: with the latter fewer loops vectorise.
    """
    C, M = mv.shape[0], mv.shape[1]
    Kp = U.shape[0]
    phi = t % C
    for k in range(Kp):
        for j in range(nb):
            z[j] = 0.0
        for c in range(M):
            u = U[k, c]
            for j in range(nb):
                z[j] += u * A[c, j]
        for j in range(nb):
            T[k, j] = math.tanh(be[j] * z[j])
    for a in range(a0, 4):
        for r in range(M):
            for j in range(nb):
                mm[a, r, j] = 0.0
            for k in range(Kp):
                cf = Cf[a, r, k]
                for j in range(nb):
                    mm[a, r, j] += cf * T[k, j]
    for r in range(M):
        pv, pk, pq = pos[1, phi, r], pos[3, phi, r], pos[2, phi, r]
        for j in range(nb):
            mv[phi, r, j] = one_m_e[j] * mm[1, r, j] + ee[j] * pv
            mk[phi, r, j] = one_m_e[j] * mm[3, r, j] + ee[j] * pk
            mm[2, r, j] = one_m_e[j] * mm[2, r, j] + ee[j] * pq
    n = t + 1 if t + 1 < C else C
    for j in range(nb):
        mx[j] = -np.inf
        tot[j] = 0.0
    for s in range(n):
        for j in range(nb):
            sc[s, j] = 0.0
        for c in range(M):
            for j in range(nb):
                sc[s, j] += mm[2, c, j] * mk[s, c, j]
        for j in range(nb):
            sc[s, j] *= gg[j]
            mx[j] = max(mx[j], sc[s, j])
    for s in range(n):
        for j in range(nb):
            sc[s, j] = math.exp(sc[s, j] - mx[j])
            tot[j] += sc[s, j]
    for s in range(n):
        for j in range(nb):
            sc[s, j] /= tot[j]
    for c in range(M):
        for j in range(nb):
            A[c, j] = 0.0
        for s in range(n):
            for j in range(nb):
                A[c, j] += sc[s, j] * mv[s, c, j]
    return n


@njit(parallel=True, cache=True)
def run_batch(U, Cf, pos, beta, g, eps, mv, mk, A, t0, n_steps, transient,
              rec_m, rec_mo, rec_A, feat, sec_feat, sec_tol,
              stats, series, sec_pts, sec_n, tail):
    """Advance every value n_steps from time t0 (state in place) and accumulate observables.

    rec_* [B, n_rec, ...] record every step when n_rec == n_steps (else nothing). Over the saved
    steps (index >= transient): stats [B, 4, M] (sum, sum of squares, min, max of mo_se), series
    [B, n_saved] receives mo_se[feat] (when it has that many columns), sec_pts/sec_n collect
    mo_se where |mo_se[sec_feat]| <= sec_tol (Poincare section), tail [B, n_tail, M] is a ring of
    the last saved values (slot (i - transient) mod n_tail).
    """
    B = mv.shape[0]
    C, M = mv.shape[1], mv.shape[2]
    Kp = U.shape[0]
    record = rec_m.shape[1] == n_steps
    keep_series = series.shape[1] == n_steps - transient
    max_sec = sec_pts.shape[1]
    n_tail = tail.shape[1]
    for b in prange(B):
        T = np.empty(Kp)
        m = np.empty((4, M))
        mo = np.empty(M)
        p = np.empty(C)
        for c in range(M):
            stats[b, 0, c] = 0.0
            stats[b, 1, c] = 0.0
            stats[b, 2, c] = np.inf
            stats[b, 3, c] = -np.inf
        for i in range(n_steps):
            t = t0 + i
            _step1(U, Cf, pos, beta[b], g[b], eps[b], mv[b], mk[b], A[b], t, T, m, mo, p)
            if record:
                for c in range(M):
                    for a in range(4):
                        rec_m[b, i, a, c] = m[a, c]
                    rec_mo[b, i, c] = mo[c]
                    rec_A[b, i, c] = A[b, c]
            if i >= transient:
                for c in range(M):
                    v = mo[c]
                    stats[b, 0, c] += v
                    stats[b, 1, c] += v * v
                    if v < stats[b, 2, c]:
                        stats[b, 2, c] = v
                    if v > stats[b, 3, c]:
                        stats[b, 3, c] = v
                if keep_series:
                    series[b, i - transient] = mo[feat]
                if abs(mo[sec_feat]) <= sec_tol and sec_n[b] < max_sec:
                    for c in range(M):
                        sec_pts[b, sec_n[b], c] = mo[c]
                    sec_n[b] += 1
                if n_tail > 0:
                    r = (i - transient) % n_tail
                    for c in range(M):
                        tail[b, r, c] = mo[c]


@njit(parallel=True, cache=True)
def lyapunov_batch(U, Cf, pos, beta, g, eps, mv, mk, A, t0, n_steps, transient, Q0, out):
    """Benettin/QR: K tangent vectors (rows of Q0 [K, D], orthonormal) pushed through the exact
    one-step Jacobian and re-orthonormalised (modified Gram-Schmidt = thin QR) every step; out [B, K, nblk]
    receives sum log |R_jj| over the steps after ``transient``, split into nblk equal consecutive blocks
    (block of averaged step i: i * nblk // (n_steps - transient); the caller divides)."""
    B = mv.shape[0]
    C, M = mv.shape[1], mv.shape[2]
    Kp = U.shape[0]
    Kx, D = Q0.shape
    nblk = out.shape[2]
    n_avg = max(n_steps - transient, 1)
    for b in prange(B):
        T = np.empty(Kp)
        m = np.empty((4, M))
        mo = np.empty(M)
        p = np.empty(C)
        dT = np.empty(Kp)
        dm = np.empty((4, M))
        ds = np.empty(C)
        Q = Q0.copy()
        acc = np.zeros((Kx, nblk))
        for i in range(n_steps):
            t = t0 + i
            n = _step1(U, Cf, pos, beta[b], g[b], eps[b], mv[b], mk[b], A[b], t, T, m, mo, p)
            for j in range(Kx):
                _tangent1(U, Cf, beta[b], g[b], eps[b], mv[b], mk[b], t, n, T, m, p, Q[j], dT, dm, ds)
            blk = (i - transient) * nblk // n_avg
            for j in range(Kx):  # modified Gram-Schmidt
                for l in range(j):
                    dot = 0.0
                    for d in range(D):
                        dot += Q[j, d] * Q[l, d]
                    for d in range(D):
                        Q[j, d] -= dot * Q[l, d]
                nrm = 0.0
                for d in range(D):
                    nrm += Q[j, d] * Q[j, d]
                nrm = math.sqrt(nrm)
                if i >= transient:
                    acc[j, blk] += math.log(nrm) if nrm > 0.0 else -np.inf
                if nrm > 0.0:
                    for d in range(D):
                        Q[j, d] /= nrm
        for j in range(Kx):
            for q in range(nblk):
                out[b, j, q] = acc[j, q]


@njit(parallel=True, cache=True)
def run_batch_inner(U, Cf, pos, beta, g, eps, mvT, mkT, AT, t0, n_steps, transient, n_parts,
                    feat, sec_feat, sec_tol, statsT, seriesT, sec_pts, sec_n, tailT):
    """Same map and observables as :func:`run_batch`, batch-innermost layout for SIMD across values.

    mvT/mkT [C, M, B], AT [M, B], statsT [4, M, B], seriesT [n_saved or 0, B], tailT [n_tail, M, B];
    the batch is split into ``n_parts`` contiguous parts run in parallel, each with its own time loop.
    No per-step recording (use :func:`run_batch` for trajectories).
    """
    C, M, B = mvT.shape
    Kp = U.shape[0]
    keep_series = seriesT.shape[0] == n_steps - transient
    max_sec = sec_pts.shape[1]
    n_tail = tailT.shape[0]
    size = (B + n_parts - 1) // n_parts
    for part in prange(n_parts):
        lo = part * size
        hi = min(B, lo + size)
        nb = hi - lo
        if nb <= 0:
            continue
        T = np.empty((Kp, nb))
        z = np.empty(nb)
        mm = np.empty((4, M, nb))
        sc = np.empty((C, nb))
        mx = np.empty(nb)
        tot = np.empty(nb)
        be = beta[lo:hi].copy()
        gg = g[lo:hi].copy()
        ee = eps[lo:hi].copy()
        one_m_e = 1.0 - ee
        mv = mvT[:, :, lo:hi].copy()
        mk = mkT[:, :, lo:hi].copy()
        A = AT[:, lo:hi].copy()
        st = np.zeros((4, M, nb))
        for c in range(M):
            for j in range(nb):
                st[2, c, j] = np.inf
                st[3, c, j] = -np.inf
        for i in range(n_steps):
            _step_inner(U, Cf, pos, be, gg, ee, one_m_e, mv, mk, A, t0 + i, 0, nb, T, z, mm, sc, mx, tot)
            if i >= transient:
                for c in range(M):
                    for j in range(nb):
                        v = mm[0, c, j]
                        st[0, c, j] += v
                        st[1, c, j] += v * v
                        st[2, c, j] = min(st[2, c, j], v)
                        st[3, c, j] = max(st[3, c, j], v)
                if keep_series:
                    for j in range(nb):
                        seriesT[i - transient, lo + j] = mm[0, feat, j]
                for j in range(nb):
                    if abs(mm[0, sec_feat, j]) <= sec_tol and sec_n[lo + j] < max_sec:
                        for c in range(M):
                            sec_pts[lo + j, sec_n[lo + j], c] = mm[0, c, j]
                        sec_n[lo + j] += 1
                if n_tail > 0:
                    rr = (i - transient) % n_tail
                    for c in range(M):
                        for j in range(nb):
                            tailT[rr, c, lo + j] = mm[0, c, j]
        mvT[:, :, lo:hi] = mv
        mkT[:, :, lo:hi] = mk
        AT[:, lo:hi] = A
        statsT[:, :, lo:hi] = st


@njit(parallel=True, cache=True)
def lyapunov_batch_inner(U, Cf, pos, beta, g, eps, mvT, mkT, AT, t0, n_steps, transient, Q0, n_parts, out):
    """Same as :func:`lyapunov_batch` in the batch-innermost layout (mvT/mkT [C, M, B], AT [M, B]):
    every inner loop runs over the values of one part, so it vectorises; out [B, K, nblk] (block sums)."""
    C, M, B = mvT.shape
    Kp = U.shape[0]
    Kx, D = Q0.shape
    CM = C * M
    oA = 2 * CM
    nblk = out.shape[2]
    n_avg = max(n_steps - transient, 1)
    size = (B + n_parts - 1) // n_parts
    for part in prange(n_parts):
        lo = part * size
        hi = min(B, lo + size)
        nb = hi - lo
        if nb <= 0:
            continue
        T = np.empty((Kp, nb))
        z = np.empty(nb)
        mm = np.empty((4, M, nb))
        sc = np.empty((C, nb))
        mx = np.empty(nb)
        tot = np.empty(nb)
        dT = np.empty((Kp, nb))
        dm = np.empty((4, M, nb))
        ds = np.empty((C, nb))
        sbar = np.empty(nb)
        dot = np.empty(nb)
        be = beta[lo:hi].copy()
        gg = g[lo:hi].copy()
        ee = eps[lo:hi].copy()
        one_m_e = 1.0 - ee
        mv = mvT[:, :, lo:hi].copy()
        mk = mkT[:, :, lo:hi].copy()
        A = AT[:, lo:hi].copy()
        Q = np.empty((Kx, D, nb))
        for q in range(Kx):
            for d in range(D):
                for j in range(nb):
                    Q[q, d, j] = Q0[q, d]
        acc = np.zeros((Kx, nblk, nb))
        for i in range(n_steps):
            t = t0 + i
            phi = t % C
            blk = (i - transient) * nblk // n_avg
            # ---- the step (mo = mm[0] is not needed) ----
            n = _step_inner(U, Cf, pos, be, gg, ee, one_m_e, mv, mk, A, t, 1, nb, T, z, mm, sc, mx, tot)
            # ---- tangent vectors through the step just taken ----
            for q in range(Kx):
                x = Q[q]
                for k in range(Kp):
                    for j in range(nb):
                        z[j] = 0.0
                    for c in range(M):
                        u = U[k, c]
                        for j in range(nb):
                            z[j] += u * x[oA + c, j]
                    for j in range(nb):
                        dT[k, j] = (1.0 - T[k, j] * T[k, j]) * be[j] * z[j]
                for a in range(1, 4):
                    for r in range(M):
                        for j in range(nb):
                            dm[a, r, j] = 0.0
                        for k in range(Kp):
                            cf = Cf[a, r, k]
                            for j in range(nb):
                                dm[a, r, j] += cf * dT[k, j]
                        for j in range(nb):
                            dm[a, r, j] *= one_m_e[j]
                for c in range(M):
                    for j in range(nb):
                        x[phi * M + c, j] = dm[1, c, j]
                        x[CM + phi * M + c, j] = dm[3, c, j]
                for j in range(nb):
                    sbar[j] = 0.0
                for s in range(n):
                    for j in range(nb):
                        ds[s, j] = 0.0
                    for c in range(M):
                        for j in range(nb):
                            ds[s, j] += dm[2, c, j] * mk[s, c, j] + mm[2, c, j] * x[CM + s * M + c, j]
                    for j in range(nb):
                        ds[s, j] *= gg[j]
                        sbar[j] += sc[s, j] * ds[s, j]
                for c in range(M):
                    for j in range(nb):
                        z[j] = 0.0
                    for s in range(n):
                        for j in range(nb):
                            z[j] += sc[s, j] * (ds[s, j] - sbar[j]) * mv[s, c, j] + sc[s, j] * x[s * M + c, j]
                    for j in range(nb):
                        x[oA + c, j] = z[j]
            # ---- modified Gram-Schmidt per value ----
            for q in range(Kx):
                for l in range(q):
                    for j in range(nb):
                        dot[j] = 0.0
                    for d in range(D):
                        for j in range(nb):
                            dot[j] += Q[q, d, j] * Q[l, d, j]
                    for d in range(D):
                        for j in range(nb):
                            Q[q, d, j] -= dot[j] * Q[l, d, j]
                for j in range(nb):
                    dot[j] = 0.0
                for d in range(D):
                    for j in range(nb):
                        dot[j] += Q[q, d, j] * Q[q, d, j]
                for j in range(nb):
                    nrm = math.sqrt(dot[j])
                    if i >= transient:
                        acc[q, blk, j] += math.log(nrm) if nrm > 0.0 else -np.inf
                    dot[j] = 1.0 / nrm if nrm > 0.0 else 0.0
                for d in range(D):
                    for j in range(nb):
                        Q[q, d, j] *= dot[j]
        for q in range(Kx):
            for r in range(nblk):
                for j in range(nb):
                    out[lo + j, q, r] = acc[q, r, j]
        mvT[:, :, lo:hi] = mv
        mkT[:, :, lo:hi] = mk
        AT[:, lo:hi] = A
