"""The finite-N stochastic network approaches the mean field as N grows."""

from __future__ import annotations

import numpy as np

from attnscope.dynamics import finite
from attnscope.dynamics import model as dm


def test_error_shrinks_with_n():
    cfg = dm.load_preset("paper")
    df = finite.finite_size_table(cfg, repeats=(1, 100, 10000), steps=8, seeds=6, beta_o=1.26405)
    rmse = df.set_index("repeats")["rmse"]
    assert rmse[100] < rmse[1] and rmse[10000] < rmse[100]
    # one-step sampling error ~ N^-1/2: a factor 100 in N is about a factor 10 in error
    first = df.set_index("repeats")["rmse_first_step"]
    assert 3 < first[100] / first[10000] < 30
    assert list(df["N"]) == [101, 9902, 990002]


def test_sampler_is_seeded_and_starts_at_x0():
    cfg = dm.load_preset("paper")
    a = finite.simulate_finite(cfg, 10, 5, seeds=[1, 2])
    b = finite.simulate_finite(cfg, 10, 5, seeds=[1, 2])
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a[0], a[1])
    assert np.all(np.abs(a) <= 1)
