"""Spearman's rho across heads with a bootstrap interval: exact on known tables, 1 on identical, 0 inside on noise."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.atlas.stats import NO_RELATION, correlation_table, spearman, spearman_ci, verdict
from attnscope.errors import InputError


def _spearman_ref(x, y):
    """Slow reference: ranks by counting (ties averaged), then the textbook Pearson formula."""
    def ranks(v):
        return [sum(1 for w in v if w < a) + (sum(1 for w in v if w == a) + 1) / 2 for a in v]

    rx, ry = ranks(list(x)), ranks(list(y))
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5
    return num / den


def test_known_table_is_exact():
    # ranks x = 1..5, y = 2,1,4,3,5: sum d^2 = 4, rho = 1 - 6*4 / (5 * 24) = 0.8
    assert spearman([1, 2, 3, 4, 5], [20, 10, 40, 30, 50]) == pytest.approx(0.8, abs=1e-12)
    assert spearman([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]) == pytest.approx(-1.0)
    # ties: x has a tie (ranks 1.5, 1.5, 3, 4)
    x, y = [1, 1, 2, 3], [1, 2, 3, 4]
    assert spearman(x, y) == pytest.approx(_spearman_ref(x, y), abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 5), st.floats(-1e3, 1e3, allow_nan=False)), min_size=3, max_size=30))
def test_matches_the_slow_reference(pairs):
    x, y = zip(*pairs)
    if len(set(x)) < 2 or len(set(y)) < 2:
        assert np.isnan(spearman(x, y))
        return
    assert spearman(x, y) == pytest.approx(_spearman_ref(x, y), abs=1e-9)


def test_identical_columns_give_one_with_a_degenerate_interval():
    x = np.random.default_rng(0).normal(size=50)
    rho, low, high, n = spearman_ci(x, x, n_boot=300)
    assert (rho, low, high, n) == (pytest.approx(1.0), pytest.approx(1.0), pytest.approx(1.0), 50)
    assert verdict(rho, low, high) == "positive"


@pytest.mark.parametrize("seed", range(5))
def test_interval_includes_zero_on_pure_noise(seed):
    rng = np.random.default_rng(100 + seed)
    x, y = rng.normal(size=120), rng.normal(size=120)
    rho, low, high, n = spearman_ci(x, y, n_boot=1000, seed=seed)
    assert low <= 0 <= high and low < rho < high and n == 120
    assert verdict(rho, low, high) == NO_RELATION


def test_a_real_relation_is_found_and_nan_rows_are_dropped():
    rng = np.random.default_rng(1)
    x = rng.normal(size=80)
    y = -x + 0.3 * rng.normal(size=80)
    y[:5] = np.nan
    rho, low, high, n = spearman_ci(x, y, n_boot=500)
    assert n == 75 and high < 0 and verdict(rho, low, high) == "negative"
    assert spearman_ci(x, y, n_boot=500) == spearman_ci(x, y, n_boot=500)  # seeded


def test_correlation_table_columns_and_groups():
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"model": ["a"] * 20 + ["b"] * 20, "s": rng.normal(size=40), "m": rng.normal(size=40)})
    df["same"] = df["s"]
    out = correlation_table(df, ["s"], ["m", "same"], n_boot=200, by="model")
    assert list(out.columns) == ["model", "x", "y", "n", "rho", "ci_low", "ci_high", "interval", "relation"]
    assert len(out) == 4 and out[out["y"] == "same"]["rho"].eq(1.0).all()
    assert out["interval"].str.contains("percentile bootstrap 95% CI").all()
    with pytest.raises(InputError, match="no column"):
        correlation_table(df, ["nope"], ["m"])
    with pytest.raises(InputError, match="n_boot"):
        spearman_ci([1, 2, 3], [1, 2, 3], n_boot=0)
    assert np.isnan(spearman_ci([1, 2], [1, 2])[0])  # too few heads
