"""Rank correlation across heads with a bootstrap interval: does a head's geometry track its behaviour?

Pure functions on arrays. :func:`spearman` is Spearman's rho (Pearson correlation of average ranks,
ties averaged); :func:`spearman_ci` adds a percentile bootstrap 95% interval over heads (heads resampled
with replacement, ``n_boot`` resamples, seeded); :func:`correlation_table` does it for every pair of
(geometry score, behaviour metric) columns of a table and says in words whether the interval excludes 0.

The interval treats heads as exchangeable; heads of one layer share inputs, so it is optimistic when
the relation is driven by a few layers (the atlas figures show the layers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from attnscope.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

N_BOOT = 2000
#: most resamples: the bootstrap holds n_boot x heads int64 indices (1e5 x 1,000 heads is 0.8 GB)
MAX_BOOT = 100_000
LEVEL = 0.95
INTERVAL = "percentile bootstrap 95% CI over heads"
NO_RELATION = "no relation distinguishable from chance"


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks along the last axis (ties share their mean rank)."""
    from scipy.stats import rankdata

    return rankdata(x, axis=-1, method="average")


def _pearson_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson correlation of matching rows: a, b [..., n] -> [...] (NaN where a row is constant)."""
    a = a - a.mean(-1, keepdims=True)
    b = b - b.mean(-1, keepdims=True)
    den = np.sqrt((a * a).sum(-1) * (b * b).sum(-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (a * b).sum(-1) / den
    return np.where(den > 0, np.clip(r, -1.0, 1.0), np.nan)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho of two equally long vectors (NaN if either is constant)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise InputError(f"x and y must be vectors of one length, got {x.shape} and {y.shape}")
    return float(_pearson_rows(_ranks(x), _ranks(y)))


def spearman_ci(
    x: Sequence[float], y: Sequence[float], n_boot: int = N_BOOT, seed: int = 0, level: float = LEVEL
) -> tuple[float, float, float, int]:
    """(rho, low, high, n): rho on the finite pairs and its percentile bootstrap interval over pairs."""
    if n_boot < 1:
        raise InputError(f"n_boot must be at least 1, not {n_boot}", params="n_boot")
    if n_boot > MAX_BOOT:
        raise InputError(f"n_boot must be at most {MAX_BOOT:,}, not {n_boot:,}", params="n_boot")
    if not 0 < level < 1:
        raise InputError(f"level must be in (0, 1), not {level}")
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    ok = np.isfinite(x) & np.isfinite(y)
    x, y = x[ok], y[ok]
    n = int(len(x))
    if n < 3:
        return float("nan"), float("nan"), float("nan"), n
    rho = spearman(x, y)
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))  # [B, n] resampled heads
    boot = _pearson_rows(_ranks(x[idx]), _ranks(y[idx]))  # [B]
    boot = boot[np.isfinite(boot)]
    if len(boot) == 0:
        return rho, float("nan"), float("nan"), n
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(boot, [tail, 100 - tail])
    return rho, float(low), float(high), n


def verdict(rho: float, low: float, high: float) -> str:
    """``positive`` / ``negative`` when the interval excludes 0, else :data:`NO_RELATION`."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return "undefined (constant or too few heads)"
    if low > 0:
        return "positive"
    if high < 0:
        return "negative"
    return NO_RELATION


def correlation_table(
    table: "pd.DataFrame",
    x_cols: Sequence[str],
    y_cols: Sequence[str],
    n_boot: int = N_BOOT,
    seed: int = 0,
    by: str | None = None,
) -> "pd.DataFrame":
    """Spearman rho with its bootstrap interval for every (x, y) pair, optionally per group ``by``.

    Columns: [by,] x, y, n, rho, ci_low, ci_high, interval, relation.
    """
    import pandas as pd

    missing = [c for c in (*x_cols, *y_cols, *([by] if by else [])) if c not in table.columns]
    if missing:
        raise InputError(f"table has no column(s) {', '.join(missing)}")
    groups = table.groupby(by, sort=False) if by else [(None, table)]
    rows = []
    for key, sub in groups:
        for x in x_cols:
            for y in y_cols:
                rho, low, high, n = spearman_ci(sub[x].to_numpy(float), sub[y].to_numpy(float), n_boot, seed)
                row = {"x": x, "y": y, "n": n, "rho": rho, "ci_low": low, "ci_high": high,
                       "interval": f"{INTERVAL} ({n_boot} resamples)", "relation": verdict(rho, low, high)}
                rows.append({by: key, **row} if by else row)
    return pd.DataFrame(rows)


def bh_adjust(p: Sequence[float]) -> np.ndarray:
    """Benjamini-Hochberg adjusted p values (false discovery rate) of ``p``, in its order.

    q_(k) = min over j >= k of p_(j) m / j for the sorted finite p values (m of them), capped at 1; NaN stays
    NaN and does not count in m. A test is declared at FDR level alpha where q <= alpha.
    """
    p = np.asarray(p, dtype=float)
    if p.ndim != 1:
        raise InputError(f"p must be a vector of p values, got shape {p.shape}", params="p")
    ok = np.isfinite(p)
    if np.any((p[ok] < 0) | (p[ok] > 1)):
        raise InputError("p values must lie in [0, 1]", params="p")
    out = np.full(p.shape, np.nan)
    vals = p[ok]
    m = len(vals)
    if m == 0:
        return out
    order = np.argsort(vals, kind="stable")
    scaled = vals[order] * m / np.arange(1, m + 1)
    q = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
    adj = np.empty(m)
    adj[order] = q
    out[ok] = adj
    return out
