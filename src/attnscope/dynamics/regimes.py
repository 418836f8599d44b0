"""Dynamical regimes: the Lyapunov classification and the original distinct-value heuristic.

Lyapunov (threshold 1e-4): lambda_1 < -thr periodic, |lambda_1| <= thr quasi-periodic,
lambda_1 > thr chaotic, lambda_1 and lambda_2 > thr hyperchaotic. Distinct values (the original
code): count the occupied bins of a 5001-bin quantisation of [-y_max, y_max] of the saved series
(y_max = max |x| of that series unless given);
< 80 periodic, < 2500 quasi-periodic, else chaotic (crude: it calls many quasi-periodic tori chaotic).
"""

from __future__ import annotations

import numpy as np

LYAPUNOV_THRESHOLD = 1e-4
DISTINCT_BINS = 5001
DISTINCT_PERIODIC = 80
DISTINCT_QUASI = 2500
REGIMES = ("periodic", "quasi-periodic", "chaotic", "hyperchaotic")


def lyapunov_regime(exponents, threshold: float = LYAPUNOV_THRESHOLD) -> str:
    """Regime from descending Lyapunov exponents (per step)."""
    lam = np.asarray(exponents, dtype=np.float64).ravel()
    if lam.size == 0 or np.isnan(lam[0]) or lam[0] == np.inf:
        return "unknown"  # (-inf: a superstable orbit, e.g. beta_o = 0, counts as periodic)
    if lam[0] > threshold:
        return "hyperchaotic" if lam.size > 1 and lam[1] > threshold else "chaotic"
    if lam[0] >= -threshold:
        return "quasi-periodic"
    return "periodic"


def distinct_regime(n_distinct: int) -> str:
    """The original heuristic's label from the number of occupied bins."""
    if n_distinct < DISTINCT_PERIODIC:
        return "periodic"
    if n_distinct < DISTINCT_QUASI:
        return "quasi-periodic"
    return "chaotic"


def count_distinct(series, y_max: float | None = None, bins: int = DISTINCT_BINS) -> np.ndarray:
    """Occupied bins of each row of ``series`` [B, n] quantised to ``bins`` levels on [-y_max, y_max].

    y_max None: per row, max |x| (so the count does not depend on the attractor's size). Returns [B].
    """
    x = np.atleast_2d(np.asarray(series, dtype=np.float64))
    if x.shape[1] == 0:
        return np.zeros(x.shape[0], dtype=np.int64)
    ym = np.max(np.abs(x), axis=1, keepdims=True) if y_max is None else np.full((x.shape[0], 1), float(y_max))
    ym = np.where(ym > 0, ym, 1.0)
    j = np.clip(np.floor((x + ym) / (2 * ym) * (bins - 1) + 0.5), 0, bins - 1)
    j.sort(axis=1)
    return 1 + np.count_nonzero(np.diff(j, axis=1), axis=1)
