"""Dynamical regimes: a classification whose threshold follows the estimator's error, and the
original distinct-value heuristic it is combined with.

A finite-time Lyapunov exponent over T averaged steps has two errors: a statistical one, measured
from the spread of block averages (``error``: std / sqrt(blocks)), and a bias from the tangent
vectors' alignment and the bounded wobble of their norm along the orbit, at most ``BIAS_LOG / T``
(log-units over the run; it is what makes a torus read -6.8e-4 after 5000 steps). The interval
``lambda +- (Z * error + BIAS_LOG / T)`` decides the Lyapunov verdict:

* above 0: ``chaotic`` (``hyperchaotic`` when lambda_2's interval is above 0 too);
* below 0: ``periodic`` (a stable orbit, whatever the distinct count says);
* containing 0: ``zero``: neither sign is resolved.

The combined label (:func:`classify`) adds the distinct-value count of the saved series (< 80
occupied bins: a periodic orbit; >= 2500 of the 5001: a filled band, as a torus fills the range it
winds over) and the Poincare section (a torus crosses the section plane densely: >= ``SECTION_QUASI``
of the up to 300 points kept from 20,000 saved steps):

=====================  ================================  ====================
Lyapunov verdict       distinct count / section          label
=====================  ================================  ====================
chaotic/hyperchaotic   >= 80                             chaotic/hyperchaotic
chaotic/hyperchaotic   < 80                              uncertain
periodic               any (a stable orbit)              periodic
zero                   < 80                              periodic
zero                   >= 2500 and a dense section       quasi-periodic
zero                   otherwise                         uncertain
=====================  ================================  ====================

Validated on the paper's zoom window against long runs (benchmarks/dynamics_regimes.py,
docs/dynamics.md); the two constants of the last rows are empirical.

The distinct-value heuristic on its own (the original code): count the occupied bins of a
5001-bin quantisation of [-y_max, y_max] of the saved series (y_max = max |x| of that series unless
given); < 80 periodic, < 2500 quasi-periodic, else chaotic (it calls most tori chaotic).
"""

from __future__ import annotations

import numpy as np

LYAPUNOV_THRESHOLD = 1e-4  # the original fixed threshold (used only when no error is known)
Z = 2.5  # standard errors a resolved exponent must lie from 0
BIAS_LOG = 2.0  # bound on the finite-time bias, log-units over the averaged run (bias <= BIAS_LOG / T)
SECTION_QUASI = 100  # Poincare-section points (of the 20,000 saved steps' up to 300) a torus shows
DISTINCT_BINS = 5001
DISTINCT_PERIODIC = 80
DISTINCT_QUASI = 2500
REGIMES = ("periodic", "quasi-periodic", "chaotic", "hyperchaotic", "uncertain")


def _resolved(lam: float, err: float, n_steps: int | None, threshold: float) -> int:
    """+1 / -1 when lam's interval lies above / below 0, else 0 (n_steps None: fixed threshold)."""
    tol = threshold if n_steps is None else Z * err + BIAS_LOG / max(int(n_steps), 1)
    if lam > tol:
        return 1
    if lam < -tol:
        return -1
    return 0


def lyapunov_regime(exponents, error=None, n_steps: int | None = None,
                    threshold: float = LYAPUNOV_THRESHOLD) -> str:
    """Regime from descending Lyapunov exponents (per step) alone.

    With ``error`` (per exponent, from :func:`attnscope.dynamics.lyapunov.lyapunov_estimate`) and
    ``n_steps`` the tolerance is Z * error + BIAS_LOG / n_steps, else the fixed ``threshold``.
    Returns periodic, quasi-periodic (both signs unresolved: consistent with 0), chaotic,
    hyperchaotic, or unknown (NaN / +inf).
    """
    lam = np.asarray(exponents, dtype=np.float64).ravel()
    err = np.zeros_like(lam) if error is None else np.asarray(error, dtype=np.float64).ravel()
    if lam.size == 0 or np.isnan(lam[0]) or lam[0] == np.inf:
        return "unknown"  # (-inf: a superstable orbit, e.g. beta_o = 0, counts as periodic)
    steps = None if error is None else n_steps
    s1 = _resolved(lam[0], err[0], steps, threshold)
    if s1 > 0:
        hyper = lam.size > 1 and _resolved(lam[1], err[1], steps, threshold) > 0
        return "hyperchaotic" if hyper else "chaotic"
    return "periodic" if s1 < 0 else "quasi-periodic"


def classify(exponents, error, n_steps: int, n_distinct: int, n_section: int) -> str:
    """The combined label of one value (see the module docstring's table)."""
    lyap = lyapunov_regime(exponents, error, n_steps)
    periodic_count = int(n_distinct) < DISTINCT_PERIODIC
    if lyap in ("chaotic", "hyperchaotic"):
        return "uncertain" if periodic_count else lyap
    if lyap == "periodic" or (lyap == "quasi-periodic" and periodic_count):
        return "periodic"
    if lyap == "quasi-periodic":
        filled = int(n_distinct) >= DISTINCT_QUASI and int(n_section) >= SECTION_QUASI
        return "quasi-periodic" if filled else "uncertain"
    return lyap


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
