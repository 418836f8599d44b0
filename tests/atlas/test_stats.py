"""Spearman's rho across heads, judged over many tests: exact against slow references, honest on noise.

The statistics of :mod:`attnscope.atlas.stats`: Spearman's rho, the cluster (whole-layer) bootstrap
interval, the block (whole-layer) permutation p-value, Benjamini-Hochberg q, and the table that reads
its verdict from q. Simulations use synthetic "models" whose heads share a per-layer random effect.
"""

from __future__ import annotations

from itertools import permutations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import rankdata, spearmanr

from attnscope.atlas.stats import (
    NO_RELATION,
    bh_adjust,
    block_permutation_p,
    cluster_bootstrap,
    correlation_table,
    spearman,
    spearman_ci,
    spearman_test,
    verdict,
)
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


def _bh_ref(p):
    """Slow reference: q_i = min over p_j >= p_i of m p_j / #{k: p_k <= p_j}, at most 1."""
    m = len(p)
    return [min(1.0, min(m * pj / sum(1 for pk in p if pk <= pj) for pj in p if pj >= pi)) for pi in p]


def _layered(rng, layers=12, heads=8, layer_sd=1.0, head_sd=0.5, slope=0.0):
    """A synthetic model: x and y with independent per-layer random effects, y = slope * x + noise."""
    layer = np.repeat(np.arange(layers), heads)
    x = rng.normal(0, layer_sd, layers)[layer] + rng.normal(0, head_sd, layers * heads)
    y = rng.normal(0, layer_sd, layers)[layer] + rng.normal(0, head_sd, layers * heads) + slope * x
    return x, y, layer


# --------------------------------------------------------------------------- rho


def test_known_table_is_exact():
    # ranks x = 1..5, y = 2,1,4,3,5: sum d^2 = 4, rho = 1 - 6*4 / (5 * 24) = 0.8
    assert spearman([1, 2, 3, 4, 5], [20, 10, 40, 30, 50]) == pytest.approx(0.8, abs=1e-12)
    assert spearman([1, 2, 3, 4, 5], [5, 4, 3, 2, 1]) == pytest.approx(-1.0)
    x, y = [1, 1, 2, 3], [1, 2, 3, 4]  # a tie: ranks 1.5, 1.5, 3, 4
    assert spearman(x, y) == pytest.approx(_spearman_ref(x, y), abs=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(-5, 5), st.floats(-1e3, 1e3, allow_nan=False)), min_size=3, max_size=30))
def test_matches_the_slow_reference(pairs):
    x, y = zip(*pairs)
    if len(set(x)) < 2 or len(set(y)) < 2:
        assert np.isnan(spearman(x, y))
        return
    assert spearman(x, y) == pytest.approx(_spearman_ref(x, y), abs=1e-9)


# --------------------------------------------------------------------------- the cluster bootstrap


@pytest.mark.parametrize("seed", [0, 7])
def test_cluster_bootstrap_equals_the_resampled_layers_spelled_out(seed):
    rng = np.random.default_rng(seed)
    layer = np.repeat(np.arange(6), [3, 3, 2, 4, 3, 1])  # layers of unequal size
    x, y = rng.normal(size=16).round(1), rng.normal(size=16).round(1)  # rounded: ties
    model = np.where(layer < 3, "a", "b")  # two strata: layers are drawn within their model
    got = cluster_bootstrap(x, y, layer, n_boot=40, seed=seed, strata=model)
    draw = np.random.default_rng(seed)
    drawn = [draw.integers(0, 3, size=(40, 3)), 3 + draw.integers(0, 3, size=(40, 3))]  # model a, then b
    for b in range(40):
        heads = np.concatenate([np.flatnonzero(layer == c) for c in np.concatenate([d[b] for d in drawn])])
        ref = spearmanr(x[heads], y[heads]).statistic
        assert got[b] == pytest.approx(ref, abs=1e-12) or (np.isnan(got[b]) and np.isnan(ref))


def test_one_head_per_layer_is_the_bootstrap_over_heads_draw_for_draw():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=50).round(1), rng.normal(size=50)
    idx = np.random.default_rng(11).integers(0, 50, size=(300, 50))  # the head bootstrap: heads with replacement
    a, b = rankdata(x[idx], axis=-1), rankdata(y[idx], axis=-1)
    a, b = a - a.mean(1, keepdims=True), b - b.mean(1, keepdims=True)
    head = (a * b).sum(1) / np.sqrt((a * a).sum(1) * (b * b).sum(1))
    np.testing.assert_allclose(cluster_bootstrap(x, y, None, 300, seed=11), head, atol=1e-12)
    np.testing.assert_allclose(cluster_bootstrap(x, y, np.arange(50), 300, seed=11), head, atol=1e-12)


def test_resampling_in_chunks_changes_nothing(monkeypatch):
    import attnscope.atlas.stats as stats

    x, y, layer = _layered(np.random.default_rng(5))
    whole = cluster_bootstrap(x, y, layer, 500, seed=2), block_permutation_p(x, y, layer, 500, seed=2)
    monkeypatch.setattr(stats, "_CHUNK_CELLS", 1000)  # ~10 resamples at a time
    assert np.array_equal(cluster_bootstrap(x, y, layer, 500, seed=2), whole[0])
    assert block_permutation_p(x, y, layer, 500, seed=2) == whole[1]


# --------------------------------------------------------------------------- the block permutation test


def test_block_permutation_p_equals_the_permutations_spelled_out():
    rng = np.random.default_rng(4)
    layer = np.repeat(np.arange(5), 3)
    x, y = rng.normal(size=15), rng.normal(size=15)
    got = block_permutation_p(x, y, layer, n_perm=60, seed=9)
    rho = abs(spearmanr(x, y).statistic)
    perms = np.argsort(np.random.default_rng(9).random((60, 5)), axis=1)  # the pairing of layers, as drawn
    hits = 0
    for perm in perms:
        y_perm = np.concatenate([y[layer == j] for j in perm])  # layer i's x meets layer perm[i]'s y
        hits += abs(spearmanr(x, y_perm).statistic) >= rho - 1e-12
    assert got == (1 + hits) / 61


def test_block_permutation_p_approaches_the_exact_p_of_all_pairings():
    rng = np.random.default_rng(6)
    layer = np.repeat(np.arange(4), 3)
    x, y = rng.normal(size=12), 0.5 * np.arange(12) + rng.normal(size=12)
    rho = abs(spearman(x, y))
    exact = np.mean([abs(spearman(x, np.concatenate([y[layer == j] for j in perm]))) >= rho - 1e-12
                     for perm in permutations(range(4))])  # all 24 pairings
    assert block_permutation_p(x, y, layer, n_perm=20000, seed=1) == pytest.approx(exact, abs=0.015)


def test_layers_of_different_sizes_or_models_are_never_exchanged():
    # two models with an offset between them and no relation inside either: pooled, the offset makes
    # rho large; permuting layers within each model keeps the offset in every pairing, so p stays large
    rng = np.random.default_rng(8)
    layer = np.tile(np.repeat(np.arange(8), 2), 2)
    model = np.repeat(["a", "b"], 16)
    x = rng.normal(size=32) + 10 * (model == "b")
    y = rng.normal(size=32) + 10 * (model == "b")
    cluster = np.char.add(model, layer.astype(str))
    assert block_permutation_p(x, y, cluster, 999, strata=model) > 0.2
    assert block_permutation_p(x, y, cluster, 999) < 0.01  # exchanging layers across models: the offset "is" a relation
    # a NaN leaves a layer with one head less: it keeps its own behaviour, the others are permuted
    x2 = x.copy()
    x2[0] = np.nan
    p = block_permutation_p(x2, y, cluster, 99, strata=model)
    assert 0 < p <= 1
    with pytest.raises(InputError, match="one stratum"):
        block_permutation_p(x, y, layer, 9, strata=model)  # layer 0 of a and of b would be one cluster


# --------------------------------------------------------------------------- Benjamini-Hochberg


def test_bh_on_a_worked_example():
    p = [0.01, 0.04, 0.03, 0.005, 0.5]
    # sorted 0.005, 0.01, 0.03, 0.04, 0.5 -> 5p/rank 0.025, 0.025, 0.05, 0.05, 0.5
    np.testing.assert_allclose(bh_adjust(p), [0.025, 0.05, 0.05, 0.025, 0.5])
    np.testing.assert_array_equal(bh_adjust([0.2, np.nan, 0.2]), [0.2, np.nan, 0.2])  # NaN: no test, m = 2
    with pytest.raises(InputError, match="p-values"):
        bh_adjust([0.5, 1.5])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.floats(0, 1), st.sampled_from([0.0, 0.01, 0.05, 1.0])), min_size=1, max_size=40))
def test_bh_matches_the_loop_and_keeps_its_promises(p):
    q = bh_adjust(p)
    np.testing.assert_allclose(q, _bh_ref(p), rtol=1e-12, atol=0)
    p = np.asarray(p)
    assert np.all(q >= p - 1e-15) and np.all(q <= 1)
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(q[order]) >= -1e-15)  # a smaller p never gets a larger q


# --------------------------------------------------------------------------- the whole test on synthetic models


def test_identical_columns_give_one_a_degenerate_interval_and_the_smallest_p():
    x, _, layer = _layered(np.random.default_rng(0), layers=30, heads=9)
    t = spearman_test(x, x, layer, n_boot=300)
    assert (t.rho, t.low, t.high, t.n, t.n_units) == (pytest.approx(1.0), pytest.approx(1.0), pytest.approx(1.0), 270, 30)
    assert t.p == 1 / 301  # no pairing of 30 distinct layers other than the identity reaches |rho| = 1
    assert verdict(t.rho, t.p) == "positive"


def test_on_pure_noise_with_a_layer_effect_the_layer_test_holds_its_level_and_the_head_bootstrap_does_not():
    rng = np.random.default_rng(2024)
    flagged_layer, flagged_heads, covered = [], [], []
    for i in range(200):  # 200 synthetic models, 12 layers x 8 heads, no relation
        x, y, layer = _layered(rng)
        flagged_layer.append(block_permutation_p(x, y, layer, n_perm=99, seed=i) <= 0.05)
        rho, low, high, _ = spearman_ci(x, y, n_boot=99, seed=i)  # heads as independent: the old interval
        flagged_heads.append(not low <= 0 <= high)
        covered.append(rho == rho)
    assert all(covered)
    assert np.mean(flagged_layer) <= 0.10  # nominal 5%; 200 models: sd 1.5 points
    assert np.mean(flagged_heads) >= 0.25  # the layer effect makes 96 heads look like far more evidence


def test_bh_keeps_a_model_of_null_tests_quiet():
    rng = np.random.default_rng(7)
    any_found = []
    for i in range(60):  # 60 models, each 10 null tests on one geometry column
        x, _, layer = _layered(rng, layers=10, heads=6)
        ys = [_layered(rng, layers=10, heads=6)[1] for _ in range(10)]
        p = [block_permutation_p(x, y, layer, n_perm=99, seed=j) for j, y in enumerate(ys)]
        any_found.append(bool(np.any(bh_adjust(p) <= 0.05)))
    assert np.mean(any_found) <= 0.12  # under the global null BH controls the chance of any finding at 5%


def test_a_planted_relation_is_found_among_null_ones():
    rng = np.random.default_rng(11)
    x, y, layer = _layered(rng, layers=24, heads=8, slope=1.0)
    df = pd.DataFrame({"layer": layer, "s": x, "planted": y})
    for k in range(9):
        df[f"noise{k}"] = _layered(rng, layers=24, heads=8)[1]
    out = correlation_table(df, ["s"], ["planted", *(f"noise{k}" for k in range(9))], n_boot=999).set_index("y")
    assert out.loc["planted", "relation"] == "positive" and out.loc["planted", "q"] <= 0.01
    assert out.loc["planted", "ci_low"] > 0
    assert (out.drop(index="planted")["relation"] == NO_RELATION).sum() >= 8


# --------------------------------------------------------------------------- the table


def test_correlation_table_columns_groups_and_families():
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"model": ["a"] * 24 + ["b"] * 24, "layer": np.tile(np.repeat(np.arange(6), 4), 2),
                       "s": rng.normal(size=48), "m": rng.normal(size=48)})
    df["same"] = df["s"]
    out = correlation_table(df, ["s"], ["m", "same"], n_boot=200, by="model")
    assert list(out.columns) == ["model", "x", "y", "n", "unit", "n_units", "few_units", "rho", "ci_low", "ci_high",
                                 "interval", "p", "copy_of", "q", "q_run", "test", "relation"]
    assert out["copy_of"].eq("").all()  # x = s alone: no column repeats another
    assert len(out) == 4 and out[out["y"] == "same"]["rho"].eq(1.0).all()
    assert (out["n"] == 24).all() and (out["n_units"] == 6).all() and (out["unit"] == "layer").all()
    assert out["interval"].str.contains("percentile bootstrap 95% CI over layers").all()
    assert out["test"].str.contains("permutation test of whole layers").all()
    for _, part in out.groupby("model"):  # q: BH within the model's tests; q_run: over all four
        np.testing.assert_allclose(part["q"], bh_adjust(part["p"].to_numpy()))
    np.testing.assert_allclose(out["q_run"], bh_adjust(out["p"].to_numpy()))
    assert (out["q"] >= out["p"]).all() and (out["q_run"] >= out["q"] - 1e-15).all()
    assert all(r == verdict(rho, q) for r, rho, q in zip(out["relation"], out["rho"], out["q_run"]))
    heads = correlation_table(df, ["s"], ["m"], n_boot=50, unit=None)  # single heads as the unit
    assert heads["unit"].iloc[0] == "head" and heads["n_units"].iloc[0] == 48
    with pytest.raises(InputError, match="no column"):
        correlation_table(df, ["nope"], ["m"])
    with pytest.raises(InputError, match="n_boot"):
        spearman_ci([1, 2, 3], [1, 2, 3], n_boot=0)
    assert np.isnan(spearman_ci([1, 2], [1, 2])[0])  # too few heads


def test_an_undefined_correlation_is_no_test_of_the_family():
    df = pd.DataFrame({"layer": np.repeat(np.arange(5), 2), "s": np.arange(10.0), "flat": 1.0,
                       "up": np.arange(10.0)})
    out = correlation_table(df, ["s"], ["flat", "up"], n_boot=99).set_index("y")
    assert np.isnan(out.loc["flat", "p"]) and np.isnan(out.loc["flat", "q"])
    assert out.loc["flat", "relation"].startswith("undefined")
    assert out.loc["up", "q"] == out.loc["up", "p"]  # a family of one test


def test_a_column_that_copies_another_is_one_test_in_each_family():
    """Non-rotary models: s at offset 1 and over offsets are s itself. Counted once, q is what the distinct
    tests alone give (was: the same test three times in the family, MiniLM 60 tests for 20 distinct)."""
    from attnscope.atlas.stats import copied_columns, judge

    rng = np.random.default_rng(3)
    df = pd.DataFrame({"model": ["a"] * 24 + ["b"] * 24, "layer": np.tile(np.repeat(np.arange(6), 4), 2),
                       "s": rng.normal(size=48), "d": rng.normal(size=48)})
    df["m"] = df["s"] + rng.normal(scale=2.0, size=48)
    df["k"] = rng.normal(size=48)
    df["s_at_1"] = df["s"] * (1 + 1e-14)  # the rounding of a mean of equal numbers
    df["s_over"] = df["s"]
    assert copied_columns(df, ["s", "d", "s_at_1", "s_over"]) == {"s_at_1": "s", "s_over": "s"}
    full = correlation_table(df, ["s", "d", "s_at_1", "s_over"], ["m", "k"], n_boot=200, by="model")
    own = correlation_table(df, ["s", "d"], ["m", "k"], n_boot=200, by="model")
    assert (full["copy_of"] != "").sum() == 8 and set(full.loc[full["copy_of"] != "", "x"]) == {"s_at_1", "s_over"}
    key = ["model", "x", "y"]
    mine = full[full["copy_of"] == ""].set_index(key).sort_index()
    ref = own.set_index(key).sort_index()
    np.testing.assert_allclose(mine["q"], ref["q"])  # the family is the distinct tests alone
    np.testing.assert_allclose(mine["q_run"], ref["q_run"])
    for r in full[full["copy_of"] != ""].itertuples():  # a copy shows its original's numbers
        orig = mine.loc[(r.model, r.copy_of, r.y)]
        assert (r.rho, r.p, r.q, r.q_run) == (orig["rho"], orig["p"], orig["q"], orig["q_run"])
    # a family of 3x the tests would have given larger q: the correction is no longer over-strict
    tripled = bh_adjust(np.concatenate([ref["p"].to_numpy()] * 3))[: len(ref)]
    assert (tripled >= ref["q_run"].to_numpy() - 1e-12).all()
    assert judge(full)["q_run"].equals(full["q_run"])  # judging again changes nothing


def _noise_by_layer(n_layers: int, n_heads: int = 4, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    t = pd.DataFrame([{"layer": li, "head": h} for li in range(n_layers) for h in range(n_heads)])
    t["x"], t["y"] = rng.normal(size=len(t)), rng.normal(size=len(t))
    return t


@pytest.mark.parametrize("n_layers", [2, 4, 5, 6])
def test_an_interval_over_too_few_layers_is_flagged(n_layers):
    """A bootstrap over 2-4 layers has a handful of distinct resamples: its interval is flagged few_units."""
    from attnscope.atlas.stats import MIN_UNITS

    out = correlation_table(_noise_by_layer(n_layers), ["x"], ["y"], n_boot=50)
    assert list(out.columns[out.columns.get_loc("n_units"):][:2]) == ["n_units", "few_units"]
    assert int(out["n_units"].iloc[0]) == n_layers
    assert bool(out["few_units"].iloc[0]) is (n_layers < MIN_UNITS)
