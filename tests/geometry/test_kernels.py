"""Geometry math: factored statistics against the explicit slow reference, and the score's properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.geometry.kernels import (
    directionality,
    directionality_ref,
    explicit_stats,
    head_stats,
    layer_matrix,
    layer_stats,
    symmetry_ref,
)

TOL = 1e-5


def dir_tol(m: np.ndarray, k: float = 2.0) -> float:
    """Tolerance for d(M) computed from float32 factors: d = (R - C) / (R + C) amplifies a norm
    error by ~ n * max_norm / (R + C) when only a sliver of a row or column exceeds its threshold."""
    r, c = np.linalg.norm(m, axis=1), np.linalg.norm(m, axis=0)
    tr, tc = r.mean() + k * r.std(ddof=1), c.mean() + k * c.std(ddof=1)
    excess = np.clip(r - tr, 0, None).sum() + np.clip(c - tc, 0, None).sum()
    if excess == 0:
        return TOL
    noise = 1e-6 * (len(r) + len(c)) * max(r.max(), c.max())  # float32 norms, relative ~1e-7
    return TOL + 4 * noise / excess


@st.composite
def factors(draw, square=True):
    """Random q [h, d, e], k [g, c, e] with h a multiple of g (MHA, GQA, MQA)."""
    g = draw(st.integers(1, 3))
    r = draw(st.sampled_from([1, 2, 4]))
    e = draw(st.integers(1, 6))
    d = draw(st.integers(3, 24))
    c = d if square else draw(st.integers(3, 24))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    scale = draw(st.sampled_from([1e-3, 1.0, 30.0]))
    q = (scale * rng.standard_normal((g * r, d, e))).astype(np.float32)
    k = rng.standard_normal((g, c, e)).astype(np.float32)
    if draw(st.booleans()):  # as views of nn.Linear weights [(h e), d]: the d axis contiguous
        q = np.ascontiguousarray(q.transpose(0, 2, 1)).transpose(0, 2, 1)
        k = np.ascontiguousarray(k.transpose(0, 2, 1)).transpose(0, 2, 1)
    return q, k


def explicit_heads(q, k):
    """M_h in float64, the slow way, with the kv map written out by hand (h // (n_q / n_kv))."""
    h, g = q.shape[0], k.shape[0]
    return [q[i].astype(np.float64) @ k[i // (h // g)].astype(np.float64).T for i in range(h)]


@settings(max_examples=60, deadline=None)
@given(factors())
def test_head_stats_match_reference(qk):
    q, k = qk
    stats = head_stats(q, k)
    dirs, n_r, n_c = stats.directionality(2.0)
    for h, m in enumerate(explicit_heads(q, k)):
        assert stats.frob2[h] == pytest.approx((m * m).sum(), rel=1e-5, abs=1e-30)
        assert abs(stats.symmetry[h] - symmetry_ref(m)) < TOL
        assert abs(dirs[h] - directionality_ref(m)) < dir_tol(m)
        for norms, count in ((np.linalg.norm(m, axis=1), n_r[h]), (np.linalg.norm(m, axis=0), n_c[h])):
            tau = norms.mean() + 2 * norms.std(ddof=1)
            if np.all(np.abs(norms - tau) > 1e-5 * max(tau, 1e-30)):  # no norm sitting on the threshold
                assert count == int((norms > tau).sum())


@settings(max_examples=60, deadline=None)
@given(factors(), st.sampled_from(["factored", "explicit", "auto"]))
def test_layer_stats_match_reference(qk, method):
    q, k = qk
    m = sum(explicit_heads(q, k))
    stats = layer_stats(q, k, method=method)
    assert abs(stats.symmetry[0] - symmetry_ref(m)) < TOL
    assert abs(stats.directionality()[0][0] - directionality_ref(m)) < TOL
    np.testing.assert_allclose(layer_matrix(q, k), m, rtol=1e-4, atol=1e-4 * np.abs(m).max())


@settings(max_examples=30, deadline=None)
@given(factors(square=False))
def test_non_square_cross_attention(qk):
    q, k = qk
    stats = head_stats(q, k)
    for h, m in enumerate(explicit_heads(q, k)):
        if m.shape[0] != m.shape[1]:
            assert np.isnan(stats.symmetry[h])
        assert abs(stats.directionality()[0][h] - directionality_ref(m)) < TOL


@settings(max_examples=40, deadline=None)
@given(factors())
def test_symmetric_form(qk):
    q, _ = qk
    stats = head_stats(q, q)  # M = Q Q^T
    np.testing.assert_allclose(stats.symmetry, 1.0, atol=1e-6)
    np.testing.assert_allclose(stats.directionality()[0], 0.0, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(st.integers(3, 30), st.integers(0, 2**31 - 1))
def test_skew_form(d, seed):
    rng = np.random.default_rng(seed)
    u, v = rng.standard_normal((2, d)).astype(np.float32)
    q = np.stack([u, v], axis=1)[None]  # [1, d, 2]
    k = np.stack([v, -u], axis=1)[None]  # M = u v^T - v u^T, skew-symmetric
    m = q[0].astype(np.float64) @ k[0].astype(np.float64).T
    assert np.allclose(m, -m.T)
    assert head_stats(q, k).symmetry[0] == pytest.approx(-1.0, abs=1e-6)


@settings(max_examples=40, deadline=None)
@given(factors())
def test_transpose_flips_directionality(qk):
    q, k = qk
    if q.shape[0] != k.shape[0]:
        k = k[np.arange(q.shape[0]) // (q.shape[0] // k.shape[0])]  # one key head per query head
    a = head_stats(q, k)
    b = head_stats(k, q)  # M^T = K Q^T
    np.testing.assert_allclose(b.directionality()[0], -a.directionality()[0], atol=1e-6)
    np.testing.assert_allclose(b.symmetry, a.symmetry, atol=1e-6)


@settings(max_examples=40, deadline=None)
@given(factors(), st.floats(1e-3, 1e3), st.floats(1e-3, 1e3))
def test_scale_invariance(qk, alpha, beta):
    q, k = qk
    a = head_stats(q, k)
    b = head_stats(q * np.float32(alpha), k * np.float32(beta))
    np.testing.assert_allclose(b.symmetry, a.symmetry, atol=1e-5)
    # d from float32 factors carries the conditioning error dir_tol bounds, once per side
    for h, m in enumerate(explicit_heads(q, k)):
        assert abs(b.directionality()[0][h] - a.directionality()[0][h]) < 2 * dir_tol(m)


def test_zero_matrix_is_defined_and_quiet():
    q = np.zeros((4, 16, 4), np.float32)
    k = np.zeros((2, 16, 4), np.float32)
    with np.errstate(all="raise"):  # no 0/0 anywhere
        stats = head_stats(q, k)
        dirs, n_r, n_c = stats.directionality()
        lay = layer_stats(q, k)
    assert np.all(stats.symmetry == 0.0) and np.all(dirs == 0.0)
    assert np.all(n_r == 0) and np.all(n_c == 0)
    assert lay.symmetry[0] == 0.0 and lay.directionality()[0][0] == 0.0
    assert symmetry_ref(np.zeros((5, 5))) == 0.0 and directionality_ref(np.zeros((5, 5))) == 0.0


def test_dominant_column_gives_negative_directionality():
    rng = np.random.default_rng(0)
    m = 0.1 * rng.standard_normal((40, 40))
    m[:, 7] += 5.0  # one supersized key column
    d, n_r, n_c = directionality(np.linalg.norm(m, axis=1)[None], np.linalg.norm(m, axis=0)[None])
    assert d[0] < -0.95 and n_c[0] == 1
    assert d[0] == pytest.approx(directionality_ref(m), abs=1e-12)
    stats = explicit_stats(m.T)  # the transpose: one supersized query row
    assert stats.directionality()[0][0] == pytest.approx(-d[0], abs=1e-12)


def test_threshold_k_is_used():
    rng = np.random.default_rng(1)
    m = rng.standard_normal((30, 30))
    m[3] *= 4.0
    stats = explicit_stats(m)
    for k in (0.5, 1.0, 2.0, 3.0):
        assert stats.directionality(k)[0][0] == pytest.approx(directionality_ref(m, k), abs=1e-12)


def test_bad_grouping_is_a_config_error():
    from attnscope.errors import ConfigError

    with pytest.raises(ConfigError):
        head_stats(np.ones((3, 8, 2), np.float32), np.ones((2, 8, 2), np.float32))


@settings(max_examples=30, deadline=None)
@given(st.integers(2, 40), st.integers(1, 7), st.integers(0, 2**31 - 1))
def test_explicit_stats_tiling(d, tile, seed):
    """The tiled <M, M^T> equals the definition for tiles that do not divide d."""
    m = np.random.default_rng(seed).standard_normal((d, d)).astype(np.float32)
    stats = explicit_stats(m, tile=tile)
    assert abs(stats.symmetry[0] - symmetry_ref(m)) < 1e-6
    np.testing.assert_allclose(stats.row_norms[0], np.linalg.norm(m.astype(np.float64), axis=1), rtol=1e-6)
    np.testing.assert_allclose(stats.col_norms[0], np.linalg.norm(m.astype(np.float64), axis=0), rtol=1e-6)


@pytest.mark.parametrize("layout", ["linear", "contiguous"])
def test_llama8b_shaped_group_agrees_with_explicit(layout):
    """One kv group of a Llama-3-8B-shaped layer (d 4096, d_h 128, 4 query heads per kv head), float32
    factors as the benchmark scores them: s and d match the explicit float64 reference to 1e-5."""
    d, e, r = 4096, 128, 4
    rng = np.random.default_rng(11)
    wq = (0.02 * rng.standard_normal((r * e, d))).astype(np.float32)  # nn.Linear layout [(h e), d]
    wk = (0.02 * rng.standard_normal((e, d))).astype(np.float32)
    wk[:, :3] *= 8.0  # a few dominant key columns: a non-trivial directionality
    q, k = wq.reshape(r, e, d).transpose(0, 2, 1), wk.reshape(1, e, d).transpose(0, 2, 1)
    if layout == "contiguous":
        q, k = np.ascontiguousarray(q), np.ascontiguousarray(k)
    stats = head_stats(q, k)
    dirs = stats.directionality()[0]
    for h in (0, r - 1):
        m = q[h].astype(np.float64) @ k[0].astype(np.float64).T
        assert abs(stats.symmetry[h] - symmetry_ref(m)) < TOL
        assert abs(dirs[h] - directionality_ref(m)) < dir_tol(m)
        assert dirs[h] < -0.05  # the dominant columns show
