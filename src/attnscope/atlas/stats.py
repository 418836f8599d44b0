"""Rank correlation across heads, judged so that it survives many tests: does a head's geometry track its behaviour?

Pure functions on arrays (numpy, vectorised over resamples).

* :func:`spearman` -- Spearman's rho (Pearson correlation of average ranks, ties averaged).
* :func:`cluster_bootstrap` / :func:`spearman_ci` -- rho of bootstrap resamples / its percentile
  bootstrap 95% interval. The resampling unit is the *cluster* (``clusters``: one label per head, the
  layer in the atlas): whole layers are drawn with replacement (within each ``strata`` label, e.g. the
  model of a pooled table), because heads of one layer read one residual stream and are not
  independent. One head per cluster is the ordinary bootstrap over heads, draw for draw.
* :func:`block_permutation_p` -- the two-sided p-value of rho from a permutation test that permutes
  whole layers: layer i's geometry meets layer j's behaviour, head by head, for a random pairing of
  the layers (only layers with the same number of heads, and of one stratum, are exchanged). Under the
  null hypothesis "the behaviour of a layer's heads is independent of their geometry, layers
  exchangeable" every such pairing is equally likely, so the test holds its level exactly, however
  strongly heads of one layer resemble each other. ``p = (1 + #{|rho*| >= |rho|}) / (1 + n_perm)``.
* :func:`spearman_test` -- rho, its interval and its p-value for one pair of columns.
* :func:`bh_adjust` -- Benjamini-Hochberg adjusted p-values (q): the false-discovery rate across a family of tests;
  :func:`family_q` counts each test once (a column that copies another, ``copy_of``, is no test of its own).
* :func:`correlation_table` -- all of this for every (geometry score, behaviour) pair of a table; the
  verdict is read from q (``q_run``: the Benjamini-Hochberg family of every test in the table).

Why not the alternatives: a percentile-bootstrap p-value over layers is only right when there are many
layers (6 in MiniLM); a permutation of single heads treats heads of one layer as independent draws and
over-flags exactly as a bootstrap over heads does; a permutation of heads within each layer is valid
but asks another question (is there a relation left inside layers?), blind to one carried by depth.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from attnscope.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

N_BOOT = 2000
#: most resamples (and permutations)
MAX_BOOT = 100_000
LEVEL = 0.95
#: false-discovery rate at which a relation is reported (the verdict reads q <= ALPHA)
ALPHA = 0.05
#: resamples handled at once: bounds memory to about this many float64 per array (8 MB)
_CHUNK_CELLS = 1_000_000
NO_RELATION = "no relation distinguishable from chance"
UNDEFINED = "undefined (constant or too few heads)"
#: an interval from fewer resampling units (layers) than this is flagged ``few_units``: a bootstrap over
#: 2-4 layers has a handful of distinct resamples, so its percentiles are not a 95% interval
MIN_UNITS = 5


def interval_label(unit: str, n_boot: int) -> str:
    """What the interval is, e.g. ``percentile bootstrap 95% CI over layers (2000 resamples)``."""
    return f"percentile bootstrap 95% CI over {unit}s ({n_boot} resamples)"


def p_label(unit: str, n_perm: int) -> str:
    """What the p-value is, e.g. ``two-sided permutation test of whole layers (2000 permutations)``."""
    what = "whole layers" if unit == "layer" else f"{unit}s"
    return f"two-sided permutation test of {what} ({n_perm} permutations)"


def pvalue(p: float) -> str:
    """A p- or q-value as text: ``0.012``, ``5.0e-04``; ``-`` where undefined."""
    if p != p:
        return "-"
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


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


def _weighted_ranks(v: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Average ranks of v [n] in the sample that holds value i w[b, i] times: w [B, n] -> [B, n].

    The rank of a value is (#copies below it) + (#copies equal to it + 1) / 2, so this equals
    :func:`_ranks` of the expanded sample, without expanding it."""
    order = np.argsort(v, kind="stable")
    vs = v[order]
    new = np.r_[True, vs[1:] != vs[:-1]]  # [n] a tie group starts here
    starts = np.flatnonzero(new)
    group = np.cumsum(new) - 1  # [n] tie group of each sorted value
    total = np.add.reduceat(w[:, order], starts, axis=1)  # [B, G] copies per tie group
    below = np.cumsum(total, axis=1) - total
    out = np.empty(w.shape, dtype=float)
    out[:, order] = (below + (total + 1) / 2)[:, group]
    return out


def _weighted_pearson(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Pearson correlation of rows of a, b [B, n] with each value counted w [B, n] times -> [B]."""
    sw = w.sum(1, keepdims=True)
    da = a - (w * a).sum(1, keepdims=True) / sw
    db = b - (w * b).sum(1, keepdims=True) / sw
    den = np.sqrt((w * da * da).sum(1) * (w * db * db).sum(1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (w * da * db).sum(1) / den
    return np.where(den > 0, np.clip(r, -1.0, 1.0), np.nan)


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's rho of two equally long vectors (NaN if either is constant)."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise InputError(f"x and y must be vectors of one length, got {x.shape} and {y.shape}")
    return float(_pearson_rows(_ranks(x), _ranks(y)))


def _check_resamples(n: int, name: str) -> None:
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise InputError(f"{name} must be a whole number, not {n!r}", params=name)
    if n < 1:
        raise InputError(f"{name} must be at least 1, not {n}", params=name)
    if n > MAX_BOOT:
        raise InputError(f"{name} must be at most {MAX_BOOT:,}, not {n:,}", params=name)


def _codes(labels: Sequence[object] | None, n: int, name: str) -> np.ndarray:
    """Integer codes 0..k-1 of ``labels`` (one per element; None: every element its own)."""
    if labels is None:
        return np.arange(n)
    arr = np.asarray(labels, dtype=object)
    if arr.shape != (n,):
        raise InputError(f"{name} must hold one label per head ({n}), not shape {arr.shape}", params=name)
    import pandas as pd

    return pd.factorize(pd.Series(arr), sort=True)[0]


def _units(x: np.ndarray, y: np.ndarray, clusters: Sequence[object] | None, strata: Sequence[object] | None):  # noqa: ANN202
    """The finite pairs and, per pair, the code of its cluster and of that cluster's stratum."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise InputError(f"x and y must be vectors of one length, got {x.shape} and {y.shape}")
    n = len(x)
    cl = _codes(clusters, n, "clusters")
    st = np.zeros(n, dtype=int) if strata is None else _codes(strata, n, "strata")
    ok = np.isfinite(x) & np.isfinite(y)
    x, y, cl, st = x[ok], y[ok], cl[ok], st[ok]
    cl = np.unique(cl, return_inverse=True)[1].reshape(-1)  # codes 0..k-1 of the clusters left
    cluster_stratum = np.zeros(cl.max() + 1 if len(cl) else 0, dtype=int)
    cluster_stratum[cl] = st
    if len(cl) and np.any(cluster_stratum[cl] != st):
        raise InputError("a cluster (layer) must lie inside one stratum (model)", params="strata")
    return x, y, cl, cluster_stratum


def _chunks(total: int, width: int) -> list[int]:
    size = max(1, _CHUNK_CELLS // max(width, 1))
    return [min(size, total - start) for start in range(0, total, size)]


def cluster_bootstrap(
    x: Sequence[float], y: Sequence[float], clusters: Sequence[object] | None = None, n_boot: int = N_BOOT,
    seed: int = 0, strata: Sequence[object] | None = None,
) -> np.ndarray:
    """Spearman's rho of ``n_boot`` bootstrap resamples of the finite pairs -> [n_boot] (NaN: a constant resample).

    Each resample draws, in every stratum of m clusters, m clusters with replacement (``clusters``: a
    label per pair, e.g. its layer; None: every pair its own cluster, the bootstrap over heads) and keeps
    all pairs of each drawn cluster as often as it was drawn."""
    _check_resamples(n_boot, "n_boot")
    x, y, cl, cluster_stratum = _units(x, y, clusters, strata)
    k = len(cluster_stratum)
    rng = np.random.default_rng(seed)
    members = [np.flatnonzero(cluster_stratum == s) for s in np.unique(cluster_stratum)]
    out = []
    for b in _chunks(n_boot, max(len(x), k)):
        counts = np.zeros((b, k))  # [b, clusters] times each cluster is drawn
        for mem in members:
            m = len(mem)
            draws = rng.integers(0, m, size=(b, m))  # [b, m] drawn clusters of this stratum
            flat = np.bincount((np.arange(b)[:, None] * m + draws).ravel(), minlength=b * m).reshape(b, m)
            counts[:, mem] = flat
        w = counts[:, cl]  # [b, n] copies of each pair
        out.append(_weighted_pearson(_weighted_ranks(x, w), _weighted_ranks(y, w), w))
    return np.concatenate(out) if out else np.empty(0)


def block_permutation_p(
    x: Sequence[float], y: Sequence[float], clusters: Sequence[object] | None = None, n_perm: int = N_BOOT,
    seed: int = 0, strata: Sequence[object] | None = None,
) -> float:
    """Two-sided p-value of Spearman's rho by permuting whole clusters (layers) of ``y`` against ``x``.

    Clusters are exchanged only with clusters of the same stratum and the same number of finite pairs
    (heads), pair by pair in table order; ``clusters=None`` permutes single pairs. NaN where rho is."""
    _check_resamples(n_perm, "n_perm")
    x, y, cl, cluster_stratum = _units(x, y, clusters, strata)
    if len(x) < 3:
        return float("nan")
    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = float(np.sqrt((rx * rx).sum() * (ry * ry).sum()))
    if den == 0:
        return float("nan")
    rho = float(rx @ ry) / den  # a permutation keeps ry's mean and spread: only the cross term changes
    sizes = np.bincount(cl)
    blocks: dict[tuple[int, int], list[np.ndarray]] = {}
    for c in range(len(sizes)):
        blocks.setdefault((int(cluster_stratum[c]), int(sizes[c])), []).append(np.flatnonzero(cl == c))
    rng = np.random.default_rng(seed)
    hits = 0
    for b in _chunks(n_perm, len(x)):
        idx = np.empty((b, len(x)), dtype=np.intp)  # [b, n] which pair's y each pair meets
        for group in blocks.values():
            heads = np.stack(group)  # [m, size] pairs of each exchangeable cluster
            if len(group) < 2:  # a cluster nothing can be exchanged with keeps its own
                idx[:, heads.ravel()] = heads.ravel()
                continue
            perm = np.argsort(rng.random((b, len(group))), axis=1)  # [b, m] a random pairing of the clusters
            idx[:, heads.ravel()] = heads[perm].reshape(b, -1)
        perm_rho = (ry[idx] @ rx) / den  # [b]
        hits += int(np.sum(np.abs(perm_rho) >= abs(rho) - 1e-12))
    return (1 + hits) / (1 + n_perm)


def bh_adjust(p: Sequence[float]) -> np.ndarray:
    """Benjamini-Hochberg adjusted p-values: q_i = min over p_j >= p_i of m p_j / rank_j, at most 1.

    m counts the finite p-values; NaN stays NaN (an undefined test is no test of the family)."""
    p = np.asarray(p, dtype=float)
    if p.ndim != 1:
        raise InputError(f"p must be a vector, not shape {p.shape}", params="p")
    if np.any((p < 0) | (p > 1)):
        raise InputError("p-values must lie in [0, 1]", params="p")
    q = np.full(p.shape, np.nan)
    ok = np.flatnonzero(np.isfinite(p))
    m = len(ok)
    if m == 0:
        return q
    order = ok[np.argsort(p[ok], kind="stable")]
    scaled = p[order] * m / np.arange(1, m + 1)
    q[order] = np.minimum(np.minimum.accumulate(scaled[::-1])[::-1], 1.0)
    return q


@dataclass(frozen=True)
class SpearmanTest:
    """Spearman's rho across n pairs in n_units clusters, its bootstrap interval and permutation p-value."""

    rho: float
    low: float
    high: float
    n: int
    n_units: int
    p: float


def spearman_test(
    x: Sequence[float], y: Sequence[float], clusters: Sequence[object] | None = None, n_boot: int = N_BOOT,
    seed: int = 0, level: float = LEVEL, strata: Sequence[object] | None = None,
) -> SpearmanTest:
    """rho on the finite pairs, its percentile cluster-bootstrap interval and block-permutation p-value
    (``n_boot`` resamples and as many permutations, both seeded by ``seed``)."""
    if not 0 < level < 1:
        raise InputError(f"level must be in (0, 1), not {level}", params="level")
    _check_resamples(n_boot, "n_boot")
    xs, ys, cl, _ = _units(x, y, clusters, strata)
    n, k = int(len(xs)), int(len(np.unique(cl)))
    nan = float("nan")
    if n < 3:
        return SpearmanTest(nan, nan, nan, n, k, nan)
    rho = spearman(xs, ys)
    boot = cluster_bootstrap(x, y, clusters, n_boot, seed, strata)
    boot = boot[np.isfinite(boot)]
    low = high = nan
    if len(boot) and rho == rho:
        tail = 100 * (1 - level) / 2
        low, high = (float(v) for v in np.percentile(boot, [tail, 100 - tail]))
    return SpearmanTest(rho, low, high, n, k, block_permutation_p(x, y, clusters, n_boot, seed, strata))


def spearman_ci(
    x: Sequence[float], y: Sequence[float], n_boot: int = N_BOOT, seed: int = 0, level: float = LEVEL,
    clusters: Sequence[object] | None = None,
) -> tuple[float, float, float, int]:
    """(rho, low, high, n): rho on the finite pairs and its percentile bootstrap interval (over
    ``clusters``, e.g. layers; None: over pairs)."""
    if not 0 < level < 1:
        raise InputError(f"level must be in (0, 1), not {level}", params="level")
    xs, ys, _, _ = _units(x, y, clusters, None)
    n = int(len(xs))
    if n < 3:
        return float("nan"), float("nan"), float("nan"), n
    rho = spearman(xs, ys)
    boot = cluster_bootstrap(x, y, clusters, n_boot, seed)
    boot = boot[np.isfinite(boot)]
    if len(boot) == 0:
        return rho, float("nan"), float("nan"), n
    tail = 100 * (1 - level) / 2
    low, high = np.percentile(boot, [tail, 100 - tail])
    return rho, float(low), float(high), n


def verdict(rho: float, q: float, alpha: float = ALPHA) -> str:
    """``positive`` / ``negative`` when the adjusted p-value ``q`` is at most ``alpha``, else :data:`NO_RELATION`."""
    if not (np.isfinite(rho) and np.isfinite(q)):
        return UNDEFINED
    if q <= alpha:
        return "positive" if rho > 0 else "negative"
    return NO_RELATION


def family_q(correlations: "pd.DataFrame", keys: Sequence[str] = ()) -> np.ndarray:
    """Benjamini-Hochberg q of every row with each test counted once: a row whose ``copy_of`` names
    another x column (the same values: s at offset 1 of a model without rotary positions is s itself)
    takes the q of that row (same ``keys`` values, e.g. model, and the same y) and is not a member of the
    family itself. Without a ``copy_of`` column every row is a test of its own."""
    p = correlations["p"].to_numpy(float)
    if "copy_of" not in correlations.columns or not len(correlations):
        return bh_adjust(p) if len(p) else np.empty(0)
    copy_of = correlations["copy_of"].fillna("").astype(str).to_numpy()
    own = copy_of == ""
    q = np.full(len(p), np.nan)
    q[own] = bh_adjust(p[own])
    cols = [*keys, "x", "y"]
    index = {tuple(r): i for i, r in zip(np.flatnonzero(own), correlations.loc[own, cols].itertuples(index=False))}
    for i in np.flatnonzero(~own):
        row = correlations.iloc[i]
        q[i] = q[index[(*(row[k] for k in keys), copy_of[i], row["y"])]]
    return q


def judge(correlations: "pd.DataFrame", alpha: float = ALPHA) -> "pd.DataFrame":
    """``q_run`` (Benjamini-Hochberg over every test the table reports, each counted once: see
    :func:`family_q`) and the ``relation`` read from it; returns a copy."""
    out = correlations.drop(columns=["q_run"], errors="ignore")
    keys = [c for c in ("model",) if c in out.columns]
    out.insert(out.columns.get_loc("q") + 1, "q_run", family_q(out, keys) if len(out) else [])
    out["relation"] = [verdict(r, q, alpha) for r, q in zip(out["rho"], out["q_run"])]
    return out


def copied_columns(table: "pd.DataFrame", cols: Sequence[str]) -> dict[str, str]:
    """column -> the first earlier column of ``cols`` holding the same values (to 1e-9 relative, the rounding
    of a mean of equal numbers; NaN where it has NaN): e.g. ``symmetry_at_1`` -> ``symmetry`` for a model
    whose positions are no rotation."""
    out: dict[str, str] = {}
    for i, c in enumerate(cols):
        a = table[c].to_numpy(float)
        for earlier in cols[:i]:
            b = table[earlier].to_numpy(float)
            if earlier not in out and np.allclose(a, b, rtol=1e-9, atol=1e-12, equal_nan=True) and (
                    np.array_equal(np.argsort(a, kind="stable"), np.argsort(b, kind="stable"))):  # the same ranks
                out[c] = earlier
                break
    return out


def statistics_info(alpha: float = ALPHA) -> dict[str, str]:
    """How the correlations were judged, for ``atlas.json``."""
    return {"resampling_unit": "layer (whole layers resampled and permuted; within each model when pooled)",
            "p_value": "two-sided permutation test of whole layers, p = (1 + #{|rho*| >= |rho|}) / (1 + n_boot)",
            "fdr": f"Benjamini-Hochberg: q over each model's tests, q_run over every test of the run, each test "
                   f"counted once (a column that copies another, copy_of, repeats its test); relation reads "
                   f"q_run <= {alpha}"}


def correlation_table(
    table: "pd.DataFrame",
    x_cols: Sequence[str],
    y_cols: Sequence[str],
    n_boot: int = N_BOOT,
    seed: int = 0,
    by: str | None = None,
    unit: str | None = "layer",
    strata: str | None = None,
    alpha: float = ALPHA,
) -> "pd.DataFrame":
    """Spearman rho, its bootstrap interval and p-value for every (x, y) pair, optionally per group ``by``.

    ``unit``: the column whose values are resampled and permuted whole (``layer``; None: single heads),
    within each ``strata`` value (e.g. the model of a pooled table). ``q``: Benjamini-Hochberg across the
    tests of one ``by`` group (a model's); ``q_run``: across every row; ``relation`` is read from ``q_run``.
    An x column whose values in a group equal an earlier x column's (``copy_of``, :func:`copied_columns`:
    the position-aware columns of a model without rotary positions) repeats that column's test: same
    numbers, and it is counted once in each Benjamini-Hochberg family (:func:`family_q`).

    ``few_units``: True where the interval rests on fewer than :data:`MIN_UNITS` resampling units.

    Columns: [by,] x, y, n, unit, n_units, few_units, rho, ci_low, ci_high, interval, p, copy_of, q, q_run,
    test, relation.
    """
    import pandas as pd

    if not 0 < alpha < 1:
        raise InputError(f"alpha must be in (0, 1), not {alpha}", params="alpha")
    missing = [c for c in (*x_cols, *y_cols, *(c for c in (by, unit, strata) if c)) if c not in table.columns]
    if missing:
        raise InputError(f"table has no column(s) {', '.join(missing)}")
    unit_name = unit or "head"
    groups = table.groupby(by, sort=False) if by else [(None, table)]
    parts = []
    for key, sub in groups:
        clusters = sub[unit].to_numpy() if unit else None
        if unit and strata:
            clusters = pd.Series(list(zip(sub[strata], sub[unit]))).astype(str).to_numpy()
        st = sub[strata].to_numpy() if strata else None
        rows = []
        copies = copied_columns(sub, list(x_cols))
        done: dict[tuple[str, str], SpearmanTest] = {}
        for x in x_cols:
            for y in y_cols:
                t = done[(copies[x], y)] if x in copies else spearman_test(
                    sub[x].to_numpy(float), sub[y].to_numpy(float), clusters, n_boot, seed, strata=st)
                done[(x, y)] = t
                row = {"x": x, "y": y, "n": t.n, "unit": unit_name, "n_units": t.n_units,
                       "few_units": t.n_units < MIN_UNITS, "rho": t.rho,
                       "ci_low": t.low, "ci_high": t.high, "interval": interval_label(unit_name, n_boot), "p": t.p,
                       "copy_of": copies.get(x, "")}
                rows.append({by: key, **row} if by else row)
        part = pd.DataFrame(rows)
        part["q"] = family_q(part, [by] if by else [])
        part["test"] = p_label(unit_name, n_boot)
        parts.append(part)
    return judge(pd.concat(parts, ignore_index=True), alpha)
