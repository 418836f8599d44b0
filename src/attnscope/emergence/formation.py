"""When does a head "form"? The rule, as a pure function on one trajectory, and per head on a sweep's table.

**The rule.** A trajectory is a score v_0, v_1, ..., v_n at the revisions in training order. With
v_0 the first value and v_n the last, the change is ``v_n - v_0``. The head forms at the first revision i
from which every later value has covered at least half of the change, i.e.
``(v_j - v_0) * sign(v_n - v_0) >= |v_n - v_0| / 2`` for all j >= i, and stays there.

**Only a change beyond the noise forms.** The trajectory's own checkpoint-to-checkpoint noise is measured as
a robust scale of its successive differences d_i = v_{i+1} - v_i: ``noise = 1.4826 * median |d_i - median(d)|``
(the MAD, scaled to a standard deviation under normal noise; measured about the median difference, so a
steady trend is not counted as noise and a single jump, a formation, barely moves it). It needs at least
:data:`MIN_DIFFERENCES` differences (4 revisions); with fewer it is NaN and only ``min_change`` applies. The
change must reach the **margin** ``max(min_change, noise_factor * c(n) * noise)`` (``noise_factor`` 2 by
default): with independent noise of standard deviation sigma at each checkpoint, both a difference and the
change ``v_n - v_0`` have standard deviation sigma * sqrt(2), so with many revisions a trajectory of pure noise
forms in about 5% of cases. ``c(n)`` widens the margin where few revisions make the noise itself uncertain
(:data:`SMALL_SAMPLE`: 7.9 at 4 revisions, 1.4 at 10, 1.1 at 30, 1 from 500), calibrated so that pure noise
forms in about 5% of trajectories at every n (tested). ``min_change`` (0.05 by default, in units of s or d)
is a floor below which nothing forms however quiet the trajectory. A NaN value anywhere gives no formation either (an unscorable head is not said to form).

**Effective ranks** (``emergence --spectra``: ``anti_rank``, ``sym_rank``, :mod:`attnscope.geometry.spectra`) follow
the same rule; only the floor is in their unit, dimensions: :data:`RANK_MIN_CHANGE` (0.5) unless ``min_change``
names one per metric.

Both directions count: a symmetric-init encoder whose s falls from 1 forms where it has fallen half way.
:func:`judge` returns the step index with the noise, the margin and the outcome (:data:`OUTCOMES`).

**What else a trajectory says** (:func:`describe`, the columns of :func:`formation`):

* a **transient**: the value left the margin around v_0 for at least :data:`HELD` consecutive revisions and came
  back inside it by the end: outcome ``transient`` (it is not a formation, and not mere noise either);
* an **overshoot**: a formed trajectory that went beyond its final value by more than the margin, held for
  :data:`HELD` revisions, before it fell back (encoder layer 0's d rising to 0.92 and ending at 0.35): ``overshoot``
  True, with ``peak`` and ``peak_step``; its formation step is read on the way to the peak;
* **borderline**: a change within :data:`BORDERLINE` (10%) of its margin, either side: ``borderline`` True (a
  formation at 1.001x its margin is as uncertain as a change at 0.999x that did not form);
* an **interval for the formation step**: the trajectory redrawn :data:`N_BOOT` times with independent normal
  noise of its own measured scale at every checkpoint (``noise / sqrt 2`` each: the noise is that of a
  difference), each judged against the same margin; ``formed_share`` is the share of redraws that form, and
  ``formed_step_low`` / ``formed_step_high`` the 2.5% and 97.5% percentiles of their formation steps (a
  bootstrap over the checkpoints' noise; NaN where the noise cannot be measured, below 4 revisions). Over seeds,
  where a grid of runs exists, the spread of the per-seed formation steps is the other interval to read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from attnscope.errors import InputError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

#: smallest |final - initial| that counts as a formation (s and d live in [-1, 1])
MIN_CHANGE = 0.05
#: the change must reach this many times the trajectory's checkpoint-to-checkpoint noise
NOISE_FACTOR = 2.0
#: successive differences needed to measure the noise (4 revisions)
MIN_DIFFERENCES = 3
#: MAD -> standard deviation under normal noise
_MAD_SCALE = 1.4826
#: c(n), n revisions: the 95% quantile of |v_n - v_0| / noise over trajectories of independent normal noise,
#: divided by 1.96 (its value for large n). Simulated once (numpy default_rng(2026), 100,000 trajectories per
#: n up to 100, 30,000 beyond); between the listed n it is interpolated, beyond 500 it is 1.
SMALL_SAMPLE = {4: 7.91, 5: 2.47, 6: 2.37, 7: 1.7, 8: 1.67, 9: 1.45, 10: 1.42, 11: 1.33, 12: 1.33, 13: 1.26,
                14: 1.26, 15: 1.22, 16: 1.21, 17: 1.19, 18: 1.19, 19: 1.16, 20: 1.16, 21: 1.15, 22: 1.13, 23: 1.13,
                24: 1.13, 25: 1.12, 26: 1.11, 27: 1.1, 28: 1.1, 29: 1.1, 30: 1.09, 40: 1.07, 50: 1.05, 60: 1.04,
                80: 1.03, 100: 1.03, 150: 1.02, 200: 1.02, 300: 1.01, 500: 1.0}
METRICS = ("symmetry", "directionality")
#: the spectral metrics (effective ranks, in dimensions) and their floor: half a dimension
RANK_METRICS = ("anti_rank", "sym_rank")
RANK_MIN_CHANGE = 0.5
#: what :func:`judge` says of a trajectory
OUTCOMES = ("formed", "transient", "inside the noise", "below min_change", "not scored")
#: consecutive revisions a transient or an overshoot must hold beyond the margin (one point out is noise)
HELD = 2
#: a change within this fraction of its margin (either side) is borderline
BORDERLINE = 0.10
#: redraws of a trajectory for its formation step's interval, and their seed
N_BOOT = 200
SEED = 0


def step_noise(values: "Sequence[float] | np.ndarray") -> float:
    """Robust scale of a trajectory's successive differences: 1.4826 * median |d_i - median(d)|, d_i = v_{i+1} - v_i;
    NaN with fewer than :data:`MIN_DIFFERENCES` differences or a non-finite value."""
    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or len(v) - 1 < MIN_DIFFERENCES or not np.isfinite(v).all():
        return float("nan")
    d = np.diff(v)  # [n - 1]
    return float(_MAD_SCALE * np.median(np.abs(d - np.median(d))))


def small_sample(n: int) -> float:
    """c(n) of :data:`SMALL_SAMPLE` for a trajectory of ``n`` revisions (n >= 4)."""
    ns = np.array(sorted(SMALL_SAMPLE), dtype=float)
    return float(np.interp(n, ns, [SMALL_SAMPLE[int(k)] for k in ns], right=1.0))


def _check_rule(min_change: float, noise_factor: float) -> None:
    for name, value in (("min_change", min_change), ("noise_factor", noise_factor)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not np.isfinite(value) or value < 0:
            raise InputError(f"{name} must be a finite number >= 0, not {value!r}", params=name)


def judge(values: Sequence[float], min_change: float = MIN_CHANGE,
          noise_factor: float = NOISE_FACTOR) -> tuple[int | None, float, float, str]:
    """(index of the revision at which ``values`` forms or None, its noise, the margin its change had to
    reach, the outcome: one of :data:`OUTCOMES`). The rule: module docstring."""
    v = np.asarray(values, dtype=float)
    if v.ndim != 1 or len(v) < 2:
        raise InputError(f"values must be a trajectory of at least 2 revisions, got shape {v.shape}", params="values")
    _check_rule(min_change, noise_factor)
    noise = step_noise(v)
    margin = max(float(min_change), noise_factor * small_sample(len(v)) * noise) if np.isfinite(noise) \
        else float(min_change)
    if not np.isfinite(v).all():
        return None, noise, margin, "not scored"
    change = v[-1] - v[0]
    if change == 0 or abs(change) < margin:  # margin >= min_change: no formation; a transient, or no change
        if _held(np.abs(v - v[0]) > margin):
            return None, noise, margin, "transient"
        return None, noise, margin, "below min_change" if change == 0 or abs(change) < min_change else "inside the noise"
    past = (v - v[0]) * np.sign(change) >= abs(change) / 2  # [n] at or beyond half way
    # the last index that is not past half way; formation is the one after it
    not_past = np.flatnonzero(~past)
    return (int(not_past[-1] + 1) if len(not_past) else 0), noise, margin, "formed"


def _held(beyond: np.ndarray) -> bool:
    """Whether ``beyond`` [n] is True for at least :data:`HELD` consecutive entries."""
    run = 0
    for b in beyond:
        run = run + 1 if b else 0
        if run >= HELD:
            return True
    return False


def describe(values: Sequence[float], min_change: float = MIN_CHANGE, noise_factor: float = NOISE_FACTOR,
             n_boot: int = N_BOOT, seed: int = SEED) -> dict[str, Any]:
    """:func:`judge` and what else the trajectory says (module docstring): {index, noise, margin, outcome,
    borderline, overshoot, peak_index, formed_share, boot_indices} (``boot_indices``: the formation index of each
    redraw that formed; ``formed_share``, ``boot_indices`` NaN / empty where the noise is not measured)."""
    v = np.asarray(values, dtype=float)
    idx, noise, margin, outcome = judge(v, min_change, noise_factor)
    out: dict[str, Any] = {"index": idx, "noise": noise, "margin": margin, "outcome": outcome,
                              "borderline": False, "overshoot": False, "peak_index": None,
                              "formed_share": float("nan"), "boot_indices": np.empty(0, dtype=np.int64)}
    if outcome == "not scored":
        return out
    change = v[-1] - v[0]
    out["borderline"] = bool(margin > 0 and abs(abs(change) - margin) <= BORDERLINE * margin)
    direction = np.sign(change) if change else 1.0
    if outcome == "formed":
        beyond = (v - v[-1]) * direction > margin  # [n] past the final value by more than the margin
        if _held(beyond):
            out["overshoot"], out["peak_index"] = True, int(np.argmax((v - v[-1]) * direction))
    elif outcome == "transient":
        out["peak_index"] = int(np.argmax(np.abs(v - v[0])))
    if np.isfinite(noise) and noise > 0 and n_boot > 0:
        out["formed_share"], out["boot_indices"] = _redraws(v, noise, margin, min_change, n_boot, seed)
    return out


def _redraws(v: np.ndarray, noise: float, margin: float, min_change: float, n_boot: int,
             seed: int) -> tuple[float, np.ndarray]:
    """(share of ``n_boot`` redraws of ``v`` that form, their formation indices): every checkpoint moved by
    independent normal noise of sd ``noise / sqrt 2``, each redraw judged against the same ``margin``."""
    rng = np.random.default_rng(seed)
    V = v[None, :] + rng.normal(0.0, noise / np.sqrt(2.0), size=(n_boot, len(v)))  # [b, n]
    change = V[:, -1] - V[:, 0]  # [b]
    formed = (np.abs(change) >= margin) & (np.abs(change) >= min_change) & (change != 0)
    past = (V - V[:, :1]) * np.sign(change)[:, None] >= np.abs(change)[:, None] / 2  # [b, n]
    not_past = ~past
    last = len(v) - 1 - np.argmax(not_past[:, ::-1], axis=1)  # [b] the last index not past half way
    idx = np.where(not_past.any(axis=1), last + 1, 0)
    return float(formed.mean()), idx[formed].astype(np.int64)


def formation_index(values: Sequence[float], min_change: float = MIN_CHANGE,
                    noise_factor: float = NOISE_FACTOR) -> int | None:
    """Index of the revision at which the trajectory ``values`` forms (module docstring), or None."""
    return judge(values, min_change, noise_factor)[0]


def formation(table: "pd.DataFrame", metrics: Sequence[str] = METRICS, min_change: "float | Mapping[str, float]" = MIN_CHANGE,
              level: str = "head", noise_factor: float = NOISE_FACTOR) -> "pd.DataFrame":
    """Per head (``level="head"``) or layer form: initial, final value and the revision / step / tokens at
    which each of ``metrics`` forms. ``table``: an emergence table (``revision``, ``step``, ``tokens`` and
    the score record), in training order. Rows: model, stack, level, layer, head, metric, initial, final,
    change, noise, margin, outcome, borderline, formed_revision, formed_step, formed_tokens (missing where
    nothing formed), formed_share, formed_step_low, formed_step_high (the interval of the formation step),
    overshoot, peak, peak_step. ``noise``: the trajectory's checkpoint-to-checkpoint noise; ``margin``: the
    change it had to reach; ``outcome``: formed, transient, inside the noise, below min_change or not scored
    (module docstring). ``min_change``: one floor for s and d (and :data:`RANK_MIN_CHANGE` for the ranks), or
    {metric: floor}."""
    import pandas as pd

    from attnscope.tables import check_table

    floors = _floors(metrics, min_change)
    for floor in floors.values():
        _check_rule(floor, noise_factor)
    if level not in ("head", "layer"):
        raise InputError(f"level must be head or layer, not {level!r}", params="level")
    check_table(table, ("model", "stack", "level", "layer", "head", "revision", "step", *metrics), "table",
                "an emergence table (attnscope.emergence.sweep(...).table)")
    rows = table[table["level"] == level]
    order = list(dict.fromkeys(table["revision"]))  # the table's own (training) order
    if len(order) < 2:
        raise InputError(f"formation needs at least 2 revisions, the table has {len(order)}", params="table")
    at = {r: i for i, r in enumerate(order)}
    axis = table.drop_duplicates("revision").set_index("revision")
    keys = ["model", "stack", "layer"] + (["head"] if level == "head" else [])
    out = []
    for key, grp in rows.groupby(keys, sort=True, dropna=False):
        grp = grp.assign(_i=grp["revision"].map(at)).sort_values("_i")
        base = dict(zip(keys, key if isinstance(key, tuple) else (key,)))
        for metric in metrics:
            vals = grp[metric].to_numpy(dtype=float)
            floor = floors[metric]
            d = describe(vals, floor, noise_factor) if len(vals) >= 2 else \
                {"index": None, "noise": float("nan"), "margin": float(floor), "outcome": "not scored",
                 "borderline": False, "overshoot": False, "peak_index": None, "formed_share": float("nan"),
                 "boot_indices": np.empty(0, dtype=np.int64)}
            idx = d["index"]
            rev = grp["revision"].iloc[idx] if idx is not None else None
            steps = grp["step"].to_numpy(dtype=float)
            boot = steps[d["boot_indices"]] if len(d["boot_indices"]) else np.empty(0)
            peak = d["peak_index"]
            out.append({**base, "level": level, "metric": metric, "initial": vals[0], "final": vals[-1],
                        "change": vals[-1] - vals[0], "noise": d["noise"], "margin": d["margin"],
                        "outcome": d["outcome"], "borderline": d["borderline"],
                        "formed_revision": rev,
                        "formed_step": axis.loc[rev, "step"] if rev is not None else None,
                        "formed_tokens": axis.loc[rev, "tokens"] if rev is not None and "tokens" in axis else None,
                        "formed_share": d["formed_share"],
                        "formed_step_low": float(np.percentile(boot, 2.5)) if len(boot) else float("nan"),
                        "formed_step_high": float(np.percentile(boot, 97.5)) if len(boot) else float("nan"),
                        "overshoot": d["overshoot"], "peak": vals[peak] if peak is not None else float("nan"),
                        "peak_step": steps[peak] if peak is not None else None})
    df = pd.DataFrame(out)
    df["peak_step"] = pd.array([None if v is None or pd.isna(v) else int(v) for v in df["peak_step"]], dtype="Int64")
    for col in ("formed_step", "formed_tokens"):
        df[col] = pd.array([None if v is None or pd.isna(v) else int(v) for v in df[col]], dtype="Int64")
    if level != "head":
        df.insert(df.columns.get_loc("layer") + 1, "head", pd.array([None] * len(df), dtype="Int64"))
    return df


def _floors(metrics: Sequence[str], min_change: "float | Mapping[str, float]") -> dict[str, float]:
    """{metric: its min_change}: a mapping as given (a metric it leaves out: its default), a number for s, d and
    any other score, :data:`RANK_MIN_CHANGE` for the effective ranks."""
    if isinstance(min_change, Mapping):
        unknown = [m for m in min_change if m not in metrics]
        if unknown:
            raise InputError(f"min_change names {', '.join(map(str, unknown))}, not among the metrics "
                             f"{', '.join(metrics)}", params="min_change")
        return {m: min_change.get(m, RANK_MIN_CHANGE if m in RANK_METRICS else MIN_CHANGE) for m in metrics}
    return {m: RANK_MIN_CHANGE if m in RANK_METRICS else min_change for m in metrics}
