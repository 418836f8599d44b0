"""Per-window intervention deltas -> one row per head with its interval, and the multiple-comparison step.

Pure functions on tables. :func:`summarise` turns per-window deltas into mean, 95% t interval over the
n windows and a one-sample t-test p value per (layer, head, intervention, measure); :func:`add_bh`
adds ``p_bh``, the Benjamini-Hochberg adjusted p value across the heads of one (intervention, measure);
:func:`needs_direction` names the heads whose behaviour collapses when only the symmetric part of their
scores is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

LEVEL = 0.95
INTERVAL = "mean over windows, 95% t interval"
#: a behaviour "collapses" under sym: the head scored at least STRONG clean, keeps under KEEP of it, p_bh < ALPHA
STRONG, KEEP, ALPHA = 0.3, 0.5, 0.05
#: the behaviours whose collapse is reported
NAMED = ("induction", "previous_token", "sink")
KEYS = ["layer", "head", "intervention", "measure"]


def t_interval(x: np.ndarray, level: float = LEVEL) -> tuple[float, float, float, float, int]:
    """(mean, low, high, p, n) of the finite values of ``x``: Student t interval of the mean and the
    two-sided one-sample t-test of mean 0. All values equal to 0: interval [0, 0], p = 1; n < 2 or a
    constant non-zero sample: interval and p undefined (NaN)."""
    from scipy import stats

    x = np.asarray(x, dtype=float)
    x = x[np.isfinite(x)]
    n = len(x)
    if n == 0:
        return float("nan"), float("nan"), float("nan"), float("nan"), 0
    mean = float(x.mean())
    if np.all(x == 0):
        return 0.0, 0.0, 0.0, 1.0, n
    if n < 2:
        return mean, float("nan"), float("nan"), float("nan"), n
    se = float(x.std(ddof=1)) / np.sqrt(n)
    if se == 0:
        return mean, float("nan"), float("nan"), float("nan"), n
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * se
    p = float(2 * stats.t.sf(abs(mean) / se, n - 1))
    return mean, mean - half, mean + half, p, n


def summarise(raw: "pd.DataFrame") -> "pd.DataFrame":
    """Per-window rows (layer, head, intervention, measure, window, clean, value, delta) -> one row per
    head and measure: n, clean (mean), value (mean), delta (mean), ci_low, ci_high, p."""
    import pandas as pd

    rows = []
    for key, sub in raw.groupby(KEYS, sort=True):
        mean, low, high, p, n = t_interval(sub["delta"].to_numpy(float))
        rows.append({**dict(zip(KEYS, key)), "n": n, "clean": float(sub["clean"].mean()),
                     "value": float(sub["value"].mean()), "delta": mean, "ci_low": low, "ci_high": high, "p": p})
    from .attention import KINDS

    out = pd.DataFrame(rows, columns=[*KEYS, "n", "clean", "value", "delta", "ci_low", "ci_high", "p"])
    order = out["intervention"].map({k: i for i, k in enumerate(KINDS)})
    out = out.assign(_order=order).sort_values(["layer", "head", "_order", "measure"], kind="stable")
    return out.drop(columns="_order").reset_index(drop=True).astype({"layer": int, "head": int, "n": int})


def add_bh(table: "pd.DataFrame") -> "pd.DataFrame":
    """``p_bh``: Benjamini-Hochberg across the heads of each (intervention, measure); ``interval`` says what
    the interval is."""
    from attnscope.atlas.stats import bh_adjust

    out = table.copy()
    out["p_bh"] = np.nan
    for _, sub in out.groupby(["intervention", "measure"], sort=False):
        out.loc[sub.index, "p_bh"] = bh_adjust(sub["p"].to_numpy(float))
    out["interval"] = [f"{INTERVAL} (n={n})" for n in out["n"]]
    return out


def needs_direction(table: "pd.DataFrame") -> "pd.DataFrame":
    """The heads whose named behaviour collapses under ``sym``: clean score >= :data:`STRONG`, under sym
    below :data:`KEEP` of it, ``p_bh`` < :data:`ALPHA`. Columns: model, layer, head, measure, clean, value,
    delta, ci_low, ci_high, p_bh, and ``anti_value``: the score under ``anti`` where it ran (a head whose
    behaviour needs both parts loses it under either; sorted by the clean score, strongest first)."""
    named = table["measure"].str.rsplit("_", n=1).str[0].isin(NAMED)
    sym = table[(table["intervention"] == "sym") & named]
    hit = sym[(sym["clean"] >= STRONG) & (sym["value"] < KEEP * sym["clean"]) & (sym["p_bh"] < ALPHA)]
    anti = table[(table["intervention"] == "anti") & named].set_index(["layer", "head", "measure"])["value"]
    hit = hit.assign(anti_value=[float(anti.get((r.layer, r.head, r.measure), float("nan"))) for r in hit.itertuples()])
    cols = [c for c in ("model", "layer", "head", "measure", "clean", "value", "delta", "ci_low", "ci_high", "p_bh",
                        "anti_value") if c in hit.columns]
    return hit[cols].sort_values("clean", ascending=False).reset_index(drop=True)
