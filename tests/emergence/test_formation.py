"""The formation rule: first revision from which a score stays past half of its change."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.emergence.formation import formation, formation_index, judge, small_sample
from attnscope.errors import InputError


def _median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2


def _reference(v, min_change, noise_factor=2.0):
    """Slow reference: the noise from sorted lists by hand, then try every index, check every later value."""
    if any(not np.isfinite(x) for x in v):
        return None
    change = v[-1] - v[0]
    if abs(change) < min_change or change == 0:
        return None
    if len(v) >= 4:
        diffs = [v[i + 1] - v[i] for i in range(len(v) - 1)]
        mid = _median(diffs)
        if abs(change) < noise_factor * small_sample(len(v)) * 1.4826 * _median([abs(d - mid) for d in diffs]):
            return None
    for i in range(len(v)):
        if all((v[j] - v[0]) * np.sign(change) >= abs(change) / 2 for j in range(i, len(v))):
            return i
    return None  # pragma: no cover - the last value always qualifies


def test_known_trajectories():
    # passes 0.5 at 2, dips at 3, stays from 4 (the half-way rule alone: its moves are as large as its change)
    assert formation_index([0, 0.1, 0.6, 0.4, 0.7, 1.0], noise_factor=0) == 4
    assert judge([0, 0.1, 0.6, 0.4, 0.7, 1.0])[3] == "inside the noise"
    assert formation_index([1.0, 0.9, 0.3, 0.2]) == 2  # a fall counts too (symmetric init losing s)
    assert formation_index([0.2, 0.2, 0.22]) is None  # change below min_change
    assert formation_index([0.0, 0.5, 1.0], min_change=0) == 1  # exactly half way counts
    assert formation_index([0.0, np.nan, 1.0]) is None
    with pytest.raises(InputError, match="at least 2"):
        formation_index([0.3])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-1, 1, allow_nan=False), min_size=2, max_size=30), st.floats(0, 0.5), st.floats(0, 4))
def test_matches_the_reference(values, min_change, noise_factor):
    assert formation_index(values, min_change, noise_factor) == _reference(values, min_change, noise_factor)


def test_a_change_inside_the_noise_never_forms():
    rng = np.random.default_rng(0)
    # the case: d moves +-0.3 between checkpoints, the last is 0.07 above the first
    noisy = np.concatenate([[0.0], rng.normal(0, 0.3, 18), [0.07]])
    idx, noise, margin, outcome = judge(noisy)
    assert idx is None and outcome == "inside the noise" and margin > 0.3 and noise > 0.15
    assert formation_index(noisy, noise_factor=0) is not None  # the old rule (min_change alone) said it formed
    # the same 0.07 change on a quiet trajectory forms, and a step change far above the noise forms at the step
    quiet = np.concatenate([np.zeros(10), np.full(10, 0.07)]) + rng.normal(0, 0.002, 20)
    assert judge(quiet)[3] == "formed" and judge(quiet)[0] == 10
    assert judge([0.0, 0.01, 0.5])[1] != judge([0.0, 0.01, 0.5])[1]  # 2 differences: noise not measured (NaN)
    with pytest.raises(InputError, match="noise_factor"):
        judge([0, 1], noise_factor=-1)


@settings(max_examples=100, deadline=None)
@given(st.floats(-1, 1, allow_nan=False), st.integers(2, 40), st.floats(0, 0.5), st.floats(0, 4))
def test_identical_values_are_no_change(value, n, min_change, noise_factor):
    idx, noise, margin, outcome = judge([value] * n, min_change, noise_factor)
    assert idx is None and outcome == "below min_change" and (n < 4 or noise == 0)


@pytest.mark.parametrize("n", [4, 5, 7, 10, 25, 40, 120])
def test_pure_noise_forms_in_about_5_percent(n):
    """Independent noise at every checkpoint (a fresh seed, not the table's): about 5% form, at any n."""
    rng = np.random.default_rng(n + 7)
    formed = [formation_index(rng.normal(0, 0.3, n), min_change=0) is not None for _ in range(3000)]
    assert 0.03 < np.mean(formed) < 0.075


def test_small_sample_factor():
    assert small_sample(4) == pytest.approx(7.91) and small_sample(1000) == 1.0
    assert small_sample(35) == pytest.approx((1.09 + 1.07) / 2)
    values = [small_sample(n) for n in range(4, 600)]
    assert all(a >= b for a, b in zip(values, values[1:]))  # never narrower with fewer revisions


def test_per_head_table():
    rows = []
    steps = [0, 10, 100, 1000]
    for i, step in enumerate(steps):
        for head, traj in enumerate(([0, 0.1, 0.8, 0.9], [0.3, 0.3, 0.3, 0.3])):
            rows.append({"model": "m", "revision": f"step{step}", "step": step, "tokens": step * 10, "stack": "encoder",
                         "level": "head", "layer": 0, "head": head, "symmetry": traj[i], "directionality": 0.0})
    got = formation(pd.DataFrame(rows))
    sym = got[got["metric"] == "symmetry"].set_index("head")
    assert sym.loc[0, "formed_step"] == 100 and sym.loc[0, "formed_tokens"] == 1000
    assert sym.loc[0, "formed_revision"] == "step100" and sym.loc[0, "change"] == pytest.approx(0.9)
    assert sym.loc[0, "outcome"] == "formed" and sym.loc[0, "margin"] >= 0.05
    assert pd.isna(sym.loc[1, "formed_step"]) and sym.loc[1, "outcome"] == "below min_change"  # identical values
    assert got[got["metric"] == "directionality"]["formed_step"].isna().all()
    with pytest.raises(InputError, match="at least 2 revisions"):
        formation(pd.DataFrame(rows[:2]))


# ------------------------------------------------------------------ issue 49, item 10
def test_a_transient_that_falls_back_inside_the_margin_is_named():
    from attnscope.emergence.formation import describe

    quiet = [0.0, 0.001, -0.001, 0.0, 0.5, 0.6, 0.55, 0.002, -0.001, 0.001, 0.0, 0.001]
    d = describe(quiet)
    assert d["outcome"] == "transient" and d["index"] is None and d["peak_index"] == 5
    one_point = [0.0, 0.001, -0.001, 0.0, 0.5, 0.002, -0.001, 0.001, 0.0, 0.001, 0.0, 0.001]
    assert describe(one_point)["outcome"] == "below min_change"  # one point out is noise, not a transient


def test_an_overshoot_is_flagged_with_its_peak():
    """Encoder layer 0's d: rises to 0.92, ends at 0.35; it forms on the way up, and says it overshot."""
    from attnscope.emergence.formation import describe

    v = [0.0, 0.01, 0.3, 0.7, 0.92, 0.9, 0.6, 0.4, 0.36, 0.35, 0.35, 0.35]
    d = describe(v)
    assert d["outcome"] == "formed" and d["overshoot"] and v[d["peak_index"]] == 0.92
    assert not describe([0.0, 0.01, 0.2, 0.3, 0.34, 0.35, 0.35, 0.35])["overshoot"]


@pytest.mark.parametrize("final,outcome", [(0.0505, "formed"), (0.0495, "below min_change")])
def test_a_change_within_10_percent_of_its_margin_is_borderline(final, outcome):
    from attnscope.emergence.formation import describe

    v = [0.0] * 6 + [final] * 6  # no noise: the margin is min_change, 0.05
    d = describe(v)
    assert d["outcome"] == outcome and d["margin"] == pytest.approx(0.05) and d["borderline"]
    assert not describe([0.0] * 6 + [0.2] * 6)["borderline"]


def test_the_formation_step_has_an_interval_over_redraws_of_the_noise():
    rng = np.random.default_rng(1)
    steps = np.arange(0, 3000, 100)
    v = 0.6 / (1 + np.exp(-(steps - 1500) / 150)) + rng.normal(0, 0.02, len(steps))
    rows = [{"model": "m", "revision": f"step{s}", "step": int(s), "tokens": int(s), "stack": "encoder",
             "level": "layer", "layer": 0, "head": None, "symmetry": x, "directionality": 0.0}
            for s, x in zip(steps, v)]
    got = formation(pd.DataFrame(rows), level="layer").set_index("metric").loc["symmetry"]
    assert got["outcome"] == "formed" and got["formed_share"] > 0.95
    assert got["formed_step_low"] <= got["formed_step"] <= got["formed_step_high"]
    assert 1000 <= got["formed_step_low"] and got["formed_step_high"] <= 2000
    for col in ("borderline", "overshoot", "peak", "peak_step"):
        assert col in got.index
