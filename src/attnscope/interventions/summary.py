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

from functools import lru_cache
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
UNDECIDED = "undecided"
LIVES_IN = (ANTISYMMETRIC, BOTH, UNKNOWN)
DETECTABLE = (f"smallest true mean change a two-sided 5% t-test detects with {POWER:.0%} power: "
              f"(t(0.975, n-1) + t({POWER}, n-1)) x sd / sqrt(n)")


@lru_cache(maxsize=4096)
def _t_quantile(q: float, df: int) -> float:
    """Student t quantile (kept: every row of a table asks the same few, and scipy's ppf is slow per call)."""
    from scipy import stats

    return float(stats.t.ppf(q, df))


def detectable_change(sd: float, n: int, power: float = POWER, level: float = LEVEL) -> float:
    """The smallest true mean change a two-sided one-sample t-test at ``1 - level`` detects with probability
    ``power``, from ``n`` windows whose deltas spread by ``sd``: (t(1 - a/2, n-1) + t(power, n-1)) sd / sqrt(n).
    NaN for n < 2 (no spread measured); 0 for sd = 0 (every window the same change). A change below it may
    be real but was too small for these windows: halving it takes about 4x the windows (:func:`windows_needed`)."""

    if n < 2 or not np.isfinite(sd):
        return float("nan")
    return float((_t_quantile(0.5 + level / 2, n - 1) + _t_quantile(power, n - 1)) * sd / np.sqrt(n))


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
    half = _t_quantile(0.5 + level / 2, n - 1) * se
    p = float(2 * stats.t.sf(abs(mean) / se, n - 1))
    return mean, mean - half, mean + half, p, n


#: resamples and seed of :func:`bootstrap_interval` (the window bootstrap beside each t interval)
BOOT_RESAMPLES, BOOT_SEED = 2000, 0


def bootstrap_interval(x: np.ndarray, rng: "np.random.Generator", level: float = LEVEL,
                       resamples: int = BOOT_RESAMPLES) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of ``x`` over resampled windows (``resamples`` draws of n with
    replacement); (0, 0) when every value is 0, NaN for fewer than 2 values. Beside the t interval it needs no
    normality; with few windows both are rough (the rows are flagged ``few_units``)."""
    x = np.asarray(x, dtype=float)
    if len(x) < 2:
        return float("nan"), float("nan")
    if np.all(x == 0):
        return 0.0, 0.0
    means = x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(1)
    a = (1 - level) / 2
    return float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def summarise(raw: "pd.DataFrame") -> "pd.DataFrame":
    """Per-window rows (layer, head, intervention, measure, window, clean, value, delta) -> one row per
    head and measure: n, clean (mean), value (mean), delta (mean), ci_low, ci_high, p, sd (of the
    per-window deltas), ``detectable_change`` (:func:`detectable_change`) and the window bootstrap's 95%
    interval ``ci_low_boot``, ``ci_high_boot`` (:func:`bootstrap_interval`)."""
    import pandas as pd

    rows = []
    rng = np.random.default_rng(BOOT_SEED)
    for key, sub in raw.groupby(KEYS, sort=True):
        deltas = sub["delta"].to_numpy(float)
        mean, low, high, p, n = t_interval(deltas)
        finite = deltas[np.isfinite(deltas)]
        sd = float(finite.std(ddof=1)) if len(finite) > 1 else float("nan")
        boot_low, boot_high = bootstrap_interval(finite, rng)
        rows.append({**dict(zip(KEYS, key)), "n": n, "clean": float(sub["clean"].mean()),
                     "value": float(sub["value"].mean()), "delta": mean, "ci_low": low, "ci_high": high, "p": p,
                     "sd": sd, "detectable_change": detectable_change(sd, n), "ci_low_boot": boot_low,
                     "ci_high_boot": boot_high})
    from .kinds import order as kind_order

    out = pd.DataFrame(rows, columns=[*KEYS, "n", "clean", "value", "delta", "ci_low", "ci_high", "p", "sd",
                                      "detectable_change", "ci_low_boot", "ci_high_boot"])
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


def contrasts(table: "pd.DataFrame", per_window: "pd.DataFrame",
              controls: "dict[str, str] | None" = None) -> "pd.DataFrame":
    """``table`` with, on each row of an intervention that has a control run beside it (:data:`.kinds.CONTROLS`:
    sym and anti against ``scale:0.5``), the paired comparison with the control's row of the same head and
    measure: ``control`` (its name), ``vs_control`` (mean over windows of this row's per-window delta minus the
    control's), ``vs_control_ci_low`` / ``_ci_high`` (95% t interval), ``vs_control_p`` and ``vs_control_p_bh``
    (Benjamini-Hochberg across the heads of one intervention and measure). ``per_window``: layer, head,
    intervention, measure, window, delta (the rows the means were taken over). Rows without a control: NaN."""
    import pandas as pd

    from attnscope.atlas.stats import bh_adjust

    from .kinds import CONTROLS

    pairs = CONTROLS if controls is None else controls
    out = table.copy()
    cols = ["vs_control", "vs_control_ci_low", "vs_control_ci_high", "vs_control_p"]
    for c in cols + ["vs_control_p_bh"]:
        out[c] = np.nan
    out["control"] = None
    if per_window is None or per_window.empty:
        return out
    wide = per_window.pivot_table(index=["layer", "head", "measure", "window"], columns="intervention",
                                  values="delta", aggfunc="mean")
    index = out.set_index(KEYS).index
    pos = pd.Series(np.arange(len(out)), index=index)
    for kind, control in pairs.items():
        if kind not in wide.columns or control not in wide.columns:
            continue
        diff = (wide[kind] - wide[control]).dropna()
        stats_rows = []
        for (layer, head, measure), sub in diff.groupby(level=["layer", "head", "measure"], sort=False):
            key = (layer, head, kind, measure)
            if key not in pos.index:
                continue
            mean, low, high, p, _n = t_interval(sub.to_numpy(float))
            stats_rows.append((int(pos[key]), mean, low, high, p))
        for i, mean, low, high, p in stats_rows:
            out.iloc[i, [out.columns.get_loc(c) for c in cols]] = [mean, low, high, p]
            out.iat[i, out.columns.get_loc("control")] = control
    for _, sub in out[out["control"].notna()].groupby(["intervention", "measure"], sort=False):
        out.loc[sub.index, "vs_control_p_bh"] = bh_adjust(sub["vs_control_p"].to_numpy(float))
    return out


def _beyond(row: "pd.Series | None", sign: int) -> bool | None:
    """Whether a row's effect is beyond its control's in direction ``sign`` (-1: loses more, +1: keeps more),
    significantly (vs_control_p_bh < ALPHA); None where no control was compared."""
    if row is None or "vs_control_p_bh" not in row.index or row.get("control") is None or \
            not np.isfinite(row.get("vs_control_p_bh", np.nan)):
        return None
    return bool(sign * row["vs_control"] > 0 and row["vs_control_p_bh"] < ALPHA)


def _vs(row: "pd.Series") -> str:
    """A row's comparison with its control in words: ``vs scale:0.5 +0.12, p_bh 0.033`` (the sign says which way)."""
    return f"vs scale:0.5 {row.get('vs_control', np.nan):+.2f}, p_bh {row.get('vs_control_p_bh', np.nan):.2g}"


def sym_collapse(table: "pd.DataFrame") -> "pd.DataFrame":
    """The heads whose named behaviour collapses under ``sym`` (clean score >= :data:`STRONG`, under sym below
    :data:`KEEP` of it, ``p_bh`` < :data:`ALPHA`) and where that behaviour lives, ``lives_in``, decided with the
    uncertainty of both parts and the scale control (:func:`contrasts`):

    * :data:`ANTISYMMETRIC` ("needs its antisymmetric part"): anti keeps it significantly (anti's whole 95%
      interval at or above :data:`KEEP` of the clean score), and both sym's loss and anti's keeping are beyond
      the ``scale:0.5`` control (paired over windows, p_bh < ALPHA): not just "its logits were halved";
    * :data:`BOTH`: anti loses it too (below KEEP, p_bh < ALPHA), both losses beyond the control's;
    * ``undecided: <reason>`` otherwise (the reasons joined by "; "); :data:`UNKNOWN` where anti did not run.

    Columns: model, layer, head, measure, clean, value, delta, ci_low, ci_high, p_bh, sym_vs_control and its
    p_bh, anti_value, anti_ci_low, anti_ci_high, anti_p_bh, anti_vs_control and its p_bh, lives_in, why;
    strongest clean score first."""
    if "model" in table.columns and table["model"].nunique() > 1:  # several models: each its own heads
        import pandas as pd

        parts = [sym_collapse(sub) for _m, sub in table.groupby("model", sort=False)]
        return pd.concat(parts, ignore_index=True).sort_values("clean", ascending=False, kind="stable").reset_index(
            drop=True)
    named = table["measure"].str.rsplit("_", n=1).str[0].isin(NAMED)
    sym = table[(table["intervention"] == "sym") & named]
    hit = sym[(sym["clean"] >= STRONG) & (sym["value"] < KEEP * sym["clean"]) & (sym["p_bh"] < ALPHA)]
    anti = table[(table["intervention"] == "anti") & named].set_index(["layer", "head", "measure"])
    rows = []
    for r in hit.itertuples(index=False):
        row = r._asdict()
        a = anti.loc[(r.layer, r.head, r.measure)] if (r.layer, r.head, r.measure) in anti.index else None
        symrow = sym[(sym["layer"] == r.layer) & (sym["head"] == r.head) & (sym["measure"] == r.measure)].iloc[0]
        row.update(sym_vs_control=symrow.get("vs_control", np.nan), sym_vs_control_p_bh=symrow.get("vs_control_p_bh", np.nan))
        if a is None:
            row.update(anti_value=np.nan, anti_ci_low=np.nan, anti_ci_high=np.nan, anti_p_bh=np.nan,
                       anti_vs_control=np.nan, anti_vs_control_p_bh=np.nan, lives_in=UNKNOWN, why="anti not run")
            rows.append(row)
            continue
        clean = float(r.clean)
        keep_low = clean + float(a["ci_low"])  # anti's interval's lower end, on the score's scale
        keeps = bool(np.isfinite(keep_low) and keep_low >= KEEP * clean)
        loses = bool(a["value"] < KEEP * clean and a["p_bh"] < ALPHA)
        sym_beyond, anti_keeps_beyond, anti_loses_beyond = _beyond(symrow, -1), _beyond(a, +1), _beyond(a, -1)
        why = []
        if sym_beyond is None:
            why.append("no scale:0.5 control run (controls=True)")
        elif not sym_beyond:
            why.append(f"sym's loss is not beyond scale:0.5's ({_vs(symrow)})")
        if keeps:
            if anti_keeps_beyond is False:
                why.append(f"anti keeps it no more than scale:0.5 does ({_vs(a)})")
            verdict = ANTISYMMETRIC
        elif loses:
            if anti_loses_beyond is False:
                why.append(f"anti's loss is not beyond scale:0.5's ({_vs(a)})")
            verdict = BOTH
        else:
            why.append("anti neither keeps it significantly (its 95% interval reaches below "
                       f"{KEEP:.0%} of the clean score) nor loses it (p_bh {a['p_bh']:.2g})")
            verdict = None
        lives = verdict if verdict is not None and not why else "undecided: " + "; ".join(why)
        row.update(anti_value=float(a["value"]), anti_ci_low=float(a["value"] - a["delta"] + a["ci_low"]),
                   anti_ci_high=float(a["value"] - a["delta"] + a["ci_high"]), anti_p_bh=float(a["p_bh"]),
                   anti_vs_control=a.get("vs_control", np.nan), anti_vs_control_p_bh=a.get("vs_control_p_bh", np.nan),
                   lives_in=lives, why="; ".join(why))
        rows.append(row)
    import pandas as pd

    cols = [c for c in ("model", "layer", "head", "measure", "clean", "value", "delta", "ci_low", "ci_high", "p_bh",
                        "sym_vs_control", "sym_vs_control_p_bh", "anti_value", "anti_ci_low", "anti_ci_high",
                        "anti_p_bh", "anti_vs_control", "anti_vs_control_p_bh", "lives_in", "why")
            if c in hit.columns or c not in ("model",)]
    out = pd.DataFrame(rows, columns=[c for c in cols if c != "model" or "model" in hit.columns])
    return out.sort_values("clean", ascending=False, kind="stable").reset_index(drop=True)


def needs_direction(table: "pd.DataFrame") -> "pd.DataFrame":
    """The heads that need their directional (antisymmetric) part, decided (:func:`sym_collapse` with
    ``lives_in`` = :data:`ANTISYMMETRIC`: sym loses the behaviour, anti keeps it, both beyond the scale control;
    a head that loses it under both parts needs the whole form, not its direction, and is not here)."""
    hit = sym_collapse(table)
    return hit[hit["lives_in"] == ANTISYMMETRIC].reset_index(drop=True)


def becomes(table: "pd.DataFrame") -> "pd.DataFrame":
    """What each head turns into under each score intervention: per (layer, head, intervention), the named
    behaviour (induction, previous token, sink; per probe) that rises most significantly (largest delta with
    p_bh < ALPHA) to a score of at least :data:`STRONG`, beside the head's strongest clean behaviour (a rise of
    that same behaviour, on either probe, is not a change of kind and is left out). Columns: layer, head, intervention, was (its
    strongest clean measure, if at least :data:`STRONG`), was_clean, measure (the one that rises), clean, value,
    delta, ci_low, ci_high, p_bh, text ("L16H2: induction_random -> previous_token_random under sym");
    heads where none rises significantly are left out."""
    import pandas as pd

    from .kinds import is_score, order as kind_order

    named = table["measure"].str.rsplit("_", n=1).str[0].isin(NAMED)
    beh = table[named & table["intervention"].map(is_score)]
    if "model" in beh.columns and beh["model"].nunique() > 1:  # several models: each its own heads
        parts = [becomes(sub).assign(model=m) for m, sub in beh.groupby("model", sort=False)]
        out = pd.concat(parts, ignore_index=True)
        return out[["model", *[c for c in out.columns if c != "model"]]]
    rows = []
    for (layer, head, kind), sub in beh.groupby(["layer", "head", "intervention"], sort=False):
        strongest = sub.loc[sub["clean"].idxmax()]
        own = str(strongest["measure"]).rsplit("_", 1)[0] if strongest["clean"] >= STRONG else None
        rise = sub[(sub["delta"] > 0) & (sub["p_bh"] < ALPHA) & (sub["value"] >= STRONG)
                   & (sub["measure"].str.rsplit("_", n=1).str[0] != own)]  # another behaviour than its own
        if rise.empty:
            continue
        top = rise.loc[rise["delta"].idxmax()]
        was = str(strongest["measure"]) if strongest["clean"] >= STRONG else None
        text = (f"L{layer}H{head}: {was or 'no strong behaviour'} -> {top['measure']} under {kind} "
                f"({top['clean']:.2f} -> {top['value']:.2f}, {top['delta']:+.2f} [{top['ci_low']:+.2f}, "
                f"{top['ci_high']:+.2f}])")
        rows.append(dict(layer=int(layer), head=int(head), intervention=kind, was=was,
                         was_clean=float(strongest["clean"]), measure=str(top["measure"]), clean=float(top["clean"]),
                         value=float(top["value"]), delta=float(top["delta"]), ci_low=float(top["ci_low"]),
                         ci_high=float(top["ci_high"]), p_bh=float(top["p_bh"]), text=text))
    out = pd.DataFrame(rows, columns=["layer", "head", "intervention", "was", "was_clean", "measure", "clean", "value",
                                      "delta", "ci_low", "ci_high", "p_bh", "text"])
    if len(out):
        out = out.assign(_o=out["intervention"].map(kind_order)).sort_values(["_o", "delta"], ascending=[True, False],
                                                                            kind="stable").drop(columns="_o")
    return out.reset_index(drop=True)


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
    table (``loss`` rows: the screen's estimate) with ``pattern_change``, the mean over text windows of the
    head's pattern change under each score intervention (NaN for ``ablate`` / ``mean``)."""
    out = summarise(rows)
    cols = [c for c in ("pattern_change", "output_change") if c in patterns.columns]
    if len(patterns):
        pc = patterns.groupby(["layer", "head", "intervention"], as_index=False)[cols].mean()
        out = out.merge(pc, on=["layer", "head", "intervention"], how="left")
    for c in ("pattern_change", "output_change"):
        if c not in out.columns:
            out[c] = np.nan
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
    loss = screen[is_loss].rename(columns=SCREEN_COLUMNS).drop(columns=["value", "sd", "detectable_change",
                                                                       "ci_low_boot", "ci_high_boot"])
    stats = ["n", "value", "delta", "ci_low", "ci_high", "p", "sd", "detectable_change", "ci_low_boot", "ci_high_boot"]
    frames = [f[f["measure"] == "loss"] for f in exact if len(f)]
    measured = (pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=[*KEYS, *stats]))
    measured = measured.reindex(columns=[*KEYS, *stats])  # (a layer stored without the bootstrap: NaN there)
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
    first = [*KEYS, "n", "clean", "value", "delta", "ci_low", "ci_high", "p", "sd", "detectable_change",
             "ci_low_boot", "ci_high_boot", "p_bh",
             "interval", "exact", "exact_reason", "n_screen", "delta_screen", "ci_low_screen", "ci_high_screen",
             "p_screen", "p_bh_screen", "pattern_change", "output_change"]
    out = out.drop(columns="_order").reset_index(drop=True)
    return out[[c for c in first if c in out.columns] + [c for c in out.columns if c not in first]]


def across_models(table: "pd.DataFrame") -> "pd.DataFrame":
    """One pooled interventions table of several models -> per intervention, measure and model (and ``all``,
    pooled): for each named behaviour (induction, previous token, sink per probe), the heads that show it
    clean (at least :data:`STRONG`) and the median [Q1, Q3] of the fraction of it they keep (score under the
    intervention / clean score), with how many of them lose it significantly (below :data:`KEEP`, p_bh <
    ALPHA); for ``loss``, the heads measured exactly and the median [Q1, Q3] of their change. A row over fewer
    than 5 heads is flagged ``few_units``. Columns: intervention, measure, model, heads, median, q1, q3,
    collapsed, statistic, few_units."""
    import pandas as pd

    from .kinds import order as kind_order

    rows = []
    named = table["measure"].str.rsplit("_", n=1).str[0].isin(NAMED)
    strong = table[named & (table["clean"] >= STRONG)]
    loss = table[(table["measure"] == "loss") & table.get("exact", pd.Series(True, index=table.index)).astype(bool)]
    for source, value, what in ((strong, "kept", "kept fraction (under / clean)"), (loss, "delta", "change in loss")):
        if source.empty:
            continue
        src = source.assign(kept=source["value"] / source["clean"]) if value == "kept" else source
        for (kind, measure), sub in src.groupby(["intervention", "measure"], sort=False):
            for model, part in [*sub.groupby("model", sort=False), ("all", sub)]:
                x = part[value].to_numpy(float)
                x = x[np.isfinite(x)]
                if not len(x):
                    continue
                collapsed = (int(((part["value"] < KEEP * part["clean"]) & (part["p_bh"] < ALPHA)).sum())
                             if value == "kept" else int(((part["p_bh"] < ALPHA) & (part["delta"] > 0)).sum()))
                rows.append(dict(intervention=kind, measure=measure, model=model, heads=len(x),
                                 median=float(np.median(x)), q1=float(np.quantile(x, 0.25)),
                                 q3=float(np.quantile(x, 0.75)), collapsed=collapsed, statistic=what,
                                 few_units=len(x) < 5))
    out = pd.DataFrame(rows, columns=["intervention", "measure", "model", "heads", "median", "q1", "q3", "collapsed",
                                      "statistic", "few_units"])
    if len(out):
        out = out.assign(_o=out["intervention"].map(kind_order), _a=out["model"].eq("all")).sort_values(
            ["_o", "measure", "_a", "model"], kind="stable").drop(columns=["_o", "_a"])
    return out.reset_index(drop=True)
