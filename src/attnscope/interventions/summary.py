"""Per-window intervention deltas -> one row per head with its interval, and the multiple-comparison step.

Pure functions on tables. :func:`summarise` turns per-window deltas into mean, 95% t interval over the
n windows, a one-sample t-test p value and the smallest change the row could detect
(:func:`detectable_change`) per (layer, head, intervention, measure); :func:`add_bh` adds ``p_bh``, the
Benjamini-Hochberg adjusted p value across the heads of one (intervention, measure); :func:`sym_collapse`
names the heads whose behaviour collapses when only the symmetric part of their scores is kept, and
where that behaviour lives (:data:`LIVES_IN`: the antisymmetric part alone, or both parts);
:func:`needs_direction` keeps those of the antisymmetric part. :func:`parse_top`, :func:`top_heads`
and :func:`join_atlas` choose heads from an atlas table and join the result to it (the CLI and
:func:`attnscope.interventions.intervene` alike).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from attnscope.errors import InputError, check_type

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

LEVEL = 0.95
INTERVAL = "mean over windows, 95% t interval"
#: a behaviour "collapses" under sym: the head scored at least STRONG clean, keeps under KEEP of it, p_bh < ALPHA
STRONG, KEEP, ALPHA = 0.3, 0.5, 0.05
#: the behaviours whose collapse is reported
NAMED = ("induction", "previous_token", "sink")
KEYS = ["layer", "head", "intervention", "measure"]
#: power of :func:`detectable_change`: the chance that a true change of that size gives p < 0.05
POWER = 0.80
#: where a behaviour that collapses under ``sym`` lives (:func:`sym_collapse`'s ``lives_in``)
ANTISYMMETRIC, BOTH, UNKNOWN = "antisymmetric part", "both parts", "unknown (anti not run)"
LIVES_IN = (ANTISYMMETRIC, BOTH, UNKNOWN)
DETECTABLE = (f"smallest true mean change a two-sided 5% t-test detects with {POWER:.0%} power: "
              f"(t(0.975, n-1) + t({POWER}, n-1)) x sd / sqrt(n)")


def detectable_change(sd: float, n: int, power: float = POWER, level: float = LEVEL) -> float:
    """The smallest true mean change a two-sided one-sample t-test at ``1 - level`` detects with probability
    ``power``, from ``n`` windows whose deltas spread by ``sd``: (t(1 - a/2, n-1) + t(power, n-1)) sd / sqrt(n).
    NaN for n < 2 (no spread measured); 0 for sd = 0 (every window the same change). A change below it may
    be real but was too small for these windows: halving it takes about 4x the windows (:func:`windows_needed`)."""
    from scipy import stats

    if n < 2 or not np.isfinite(sd):
        return float("nan")
    return float((stats.t.ppf(0.5 + level / 2, n - 1) + stats.t.ppf(power, n - 1)) * sd / np.sqrt(n))


def windows_needed(sd: float, change: float, power: float = POWER, level: float = LEVEL, most: int = 100_000) -> int:
    """The fewest windows n whose :func:`detectable_change` at spread ``sd`` is at most ``change`` (> 0);
    ``most + 1`` where even ``most`` windows are not enough."""
    if not change > 0:
        raise ValueError(f"change must be above 0, not {change}")
    n = 2
    while n <= most and detectable_change(sd, n, power, level) > change:
        n = n + 1 if n < 64 else int(n * 1.05) + 1
    if n > most:
        return most + 1
    while n > 2 and detectable_change(sd, n - 1, power, level) <= change:  # back from a coarse step
        n -= 1
    return n


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
    head and measure: n, clean (mean), value (mean), delta (mean), ci_low, ci_high, p, sd (of the
    per-window deltas) and ``detectable_change`` (:func:`detectable_change`)."""
    import pandas as pd

    rows = []
    for key, sub in raw.groupby(KEYS, sort=True):
        deltas = sub["delta"].to_numpy(float)
        mean, low, high, p, n = t_interval(deltas)
        finite = deltas[np.isfinite(deltas)]
        sd = float(finite.std(ddof=1)) if len(finite) > 1 else float("nan")
        rows.append({**dict(zip(KEYS, key)), "n": n, "clean": float(sub["clean"].mean()),
                     "value": float(sub["value"].mean()), "delta": mean, "ci_low": low, "ci_high": high, "p": p,
                     "sd": sd, "detectable_change": detectable_change(sd, n)})
    from .kinds import order as kind_order

    out = pd.DataFrame(rows, columns=[*KEYS, "n", "clean", "value", "delta", "ci_low", "ci_high", "p", "sd",
                                      "detectable_change"])
    order = out["intervention"].map(lambda k: kind_order(k))
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


def sym_collapse(table: "pd.DataFrame") -> "pd.DataFrame":
    """The heads whose named behaviour collapses under ``sym``: clean score >= :data:`STRONG`, under sym
    below :data:`KEEP` of it, ``p_bh`` < :data:`ALPHA`; and where that behaviour lives, ``lives_in``:
    :data:`ANTISYMMETRIC` when the head keeps at least :data:`KEEP` of it under ``anti`` (the directional
    part alone carries it), :data:`BOTH` when it collapses under ``anti`` too (it needs the whole form),
    :data:`UNKNOWN` where ``anti`` did not run. Columns: model, layer, head, measure, clean, value, delta,
    ci_low, ci_high, p_bh, anti_value (the score under anti), lives_in; strongest clean score first."""
    named = table["measure"].str.rsplit("_", n=1).str[0].isin(NAMED)
    sym = table[(table["intervention"] == "sym") & named]
    hit = sym[(sym["clean"] >= STRONG) & (sym["value"] < KEEP * sym["clean"]) & (sym["p_bh"] < ALPHA)]
    anti = table[(table["intervention"] == "anti") & named].set_index(["layer", "head", "measure"])["value"]
    anti_value = [float(anti.get((r.layer, r.head, r.measure), float("nan"))) for r in hit.itertuples()]
    lives = [UNKNOWN if a != a else ANTISYMMETRIC if a >= KEEP * c else BOTH
             for a, c in zip(anti_value, hit["clean"])]
    hit = hit.assign(anti_value=anti_value, lives_in=lives)
    cols = [c for c in ("model", "layer", "head", "measure", "clean", "value", "delta", "ci_low", "ci_high", "p_bh",
                        "anti_value", "lives_in") if c in hit.columns]
    return hit[cols].sort_values("clean", ascending=False, kind="stable").reset_index(drop=True)


def needs_direction(table: "pd.DataFrame") -> "pd.DataFrame":
    """The heads that need their directional (antisymmetric) part: their named behaviour collapses under
    ``sym`` and is kept under ``anti`` (:func:`sym_collapse` with ``lives_in`` = :data:`ANTISYMMETRIC`;
    a head that loses it under both parts needs the whole form, not its direction, and is not here)."""
    hit = sym_collapse(table)
    return hit[hit["lives_in"] == ANTISYMMETRIC].reset_index(drop=True)


# --------------------------------------------------------------------------- choosing heads from an atlas


def parse_top(spec: "str | Sequence[tuple[int, str]]") -> list[tuple[int, str]]:
    """``"4:induction_random,3:-directionality"`` (or [(4, "induction_random"), ...]) -> checked (K, COLUMN)
    pairs: the K heads scoring highest on COLUMN, or with ``-COLUMN`` the K lowest (the most negative d)."""
    pairs: list[tuple[int, str]] = []
    if isinstance(spec, str):
        for part in (p.strip() for p in spec.split(",")):
            k, colon, column = part.partition(":")
            if not (colon and k.strip().isascii() and k.strip().isdigit() and int(k) > 0 and column.strip()):
                raise InputError(f"top must be K:COLUMN (the K highest) or K:-COLUMN (the K lowest) with K >= 1, "
                                 f"e.g. 10:previous_token_random, not {part!r}", params="top")
            pairs.append((int(k), column.strip()))
        return pairs
    check_type(spec, (list, tuple), "top", "'K:COLUMN[,K:-COLUMN...]' or a list of (K, COLUMN) pairs")
    for pair in spec:
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[1], str) and pair[1]
                and isinstance(pair[0], (int, np.integer)) and not isinstance(pair[0], (bool, np.bool_))
                and pair[0] > 0):
            raise InputError(f"top must hold (K, COLUMN) pairs with a whole K >= 1, not {pair!r:.40}", params="top")
        pairs.append((int(pair[0]), pair[1]))
    if not pairs:
        raise InputError("top is empty", params="top")
    return pairs


def check_top_columns(top: list[tuple[int, str]], columns: Sequence[str]) -> None:
    """Every COLUMN of ``top`` (its ``-`` dropped) is among ``columns`` (an atlas table's numeric columns)."""
    for _k, column in top:
        name = column[1:] if column.startswith("-") else column
        if name not in columns:
            raise InputError(f"top: the atlas table has no column {name!r} (e.g. {', '.join(list(columns)[:6])})",
                             params="top")


def top_heads(atlas_table: "pd.DataFrame", top: list[tuple[int, str]]) -> list[tuple[int, int]]:
    """The (layer, head) pairs of :func:`parse_top`'s ``top`` in ``atlas_table``: for each (K, COLUMN) the K
    highest on COLUMN (``-COLUMN``: the K lowest), in that order, each head once."""
    check_top_columns(top, list(atlas_table.columns))
    chosen: list[tuple[int, int]] = []
    for k, column in top:
        low = column.startswith("-")
        name = column[1:] if low else column
        best = atlas_table.nsmallest(k, name) if low else atlas_table.nlargest(k, name)
        chosen += [pair for pair in zip(best["layer"].astype(int), best["head"].astype(int)) if pair not in chosen]
    return chosen


def join_atlas(table: "pd.DataFrame", atlas_table: "pd.DataFrame") -> "pd.DataFrame":
    """An interventions table with each head's atlas row (geometry, behaviour, cluster) joined on
    (layer, head) (and model, when both name the same one): what ``attnscope atlas --interventions`` writes."""
    keep = [c for c in atlas_table.columns if c not in ("stack",)]
    right = atlas_table[keep]
    on = ["model", "layer", "head"]
    if set(atlas_table["model"]) != set(table["model"]):
        if atlas_table["model"].nunique() != 1:
            raise InputError("atlas must be the atlas of the model intervened on (one model)", params="atlas")
        right, on = right.drop(columns="model"), ["layer", "head"]
    return table.merge(right, on=on, how="left", validate="many_to_one")


#: the screen's statistics of a loss row, as the final table names them (beside the exact ones)
SCREEN_COLUMNS = {"n": "n_screen", "delta": "delta_screen", "ci_low": "ci_low_screen", "ci_high": "ci_high_screen",
                  "p": "p_screen"}


def summarise_screen(rows: "pd.DataFrame", patterns: "pd.DataFrame") -> "pd.DataFrame":
    """The screen's per-window rows (:func:`attnscope.interventions.screen.screen_pass`) -> :func:`summarise`'s
    table (``loss`` rows: the first-order estimate) with ``pattern_change``, the mean over text windows of the
    head's pattern change under each score intervention (NaN for ``ablate`` / ``mean``)."""
    out = summarise(rows)
    if len(patterns):
        pc = patterns.groupby(["layer", "head", "intervention"], as_index=False)["pattern_change"].mean()
        out = out.merge(pc, on=["layer", "head", "intervention"], how="left")
    else:
        out["pattern_change"] = np.nan
    return out


def join_screen(screen: "pd.DataFrame", exact: "Sequence[pd.DataFrame]",
                reasons: "dict[tuple[int, int], str]") -> "pd.DataFrame":
    """One table from the summarised screen and the exact layer passes' summarised ``loss`` rows: behaviour rows
    as the screen measured them (exactly), and per loss row the exact statistics (``n`` 0 and NaN where the
    head was not measured exactly) beside the screen's (:data:`SCREEN_COLUMNS`); ``exact`` (bool),
    ``exact_reason`` (:data:`attnscope.interventions.screen.REASONS`), ``p_bh`` and ``p_bh_screen``."""
    import pandas as pd

    from attnscope.atlas.stats import bh_adjust

    from .kinds import order as kind_order
    from .screen import REASONS

    is_loss = screen["measure"] == "loss"
    behaviour = screen[~is_loss].assign(exact=True, exact_reason="behaviour: exact from the head's own layer")
    loss = screen[is_loss].rename(columns=SCREEN_COLUMNS).drop(columns=["value", "sd", "detectable_change"])
    stats = ["n", "value", "delta", "ci_low", "ci_high", "p", "sd", "detectable_change"]
    frames = [f[f["measure"] == "loss"] for f in exact if len(f)]
    measured = (pd.concat(frames, ignore_index=True)[[*KEYS, *stats]] if frames
                else pd.DataFrame(columns=[*KEYS, *stats]))
    loss = loss.merge(measured.astype({"layer": int, "head": int}), on=KEYS, how="left")
    loss["n"] = loss["n"].fillna(0).astype(int)
    pairs = list(zip(loss["layer"].astype(int), loss["head"].astype(int)))
    loss["exact"] = [p in reasons and n > 0 for p, n in zip(pairs, loss["n"])]
    loss["exact_reason"] = [REASONS[reasons[p]] if ok else "screened only" for p, ok in zip(pairs, loss["exact"])]
    out = pd.concat([behaviour, loss], ignore_index=True)
    out["p_bh"] = np.nan
    out["p_bh_screen"] = np.nan
    for _, sub in out.groupby(["intervention", "measure"], sort=False):
        out.loc[sub.index, "p_bh"] = bh_adjust(sub["p"].to_numpy(float))
        if sub["p_screen"].notna().any():
            out.loc[sub.index, "p_bh_screen"] = bh_adjust(sub["p_screen"].to_numpy(float))
    out["interval"] = [f"{INTERVAL} (n={n})" if n > 0 else "not measured exactly (screened: *_screen columns)"
                       for n in out["n"]]
    order = out["intervention"].map(lambda k: kind_order(k))
    out = out.assign(_order=order).sort_values(["layer", "head", "_order", "measure"], kind="stable")
    first = [*KEYS, "n", "clean", "value", "delta", "ci_low", "ci_high", "p", "sd", "detectable_change", "p_bh",
             "interval", "exact", "exact_reason", "n_screen", "delta_screen", "ci_low_screen", "ci_high_screen",
             "p_screen", "p_bh_screen", "pattern_change"]
    out = out.drop(columns="_order").reset_index(drop=True)
    return out[[c for c in first if c in out.columns] + [c for c in out.columns if c not in first]]
