"""Rotary geometry math: the factored per-offset statistics against an explicit d x d reference, and properties.

Properties: offset 0 is the unrotated form; unrotated dims do not move with the offset; a head with
Q = K in a rotary model is symmetric at offset 0 and M_{-o} = M_o^T (so s(-o) = s(o), d(-o) = -d(o));
per-pair energy shares sum to 1 and are offset-free definitions from the Grams.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.errors import ConfigError, InputError
from attnscope.families.rope import ADJACENT, HALF_SPLIT, default_inv_freq, make_layout
from attnscope.geometry.kernels import directionality_ref, explicit_stats, head_stats, layer_stats, symmetry_ref
from attnscope.geometry.offsets import check_offsets, parse_offsets
from attnscope.geometry.rotary import (
    offset_form,
    offset_head_stats,
    offset_layer_stats,
    offset_symmetry,
    pair_usage,
    rotation_matrix,
)

from .test_kernels import dir_tol


@st.composite
def rotary_factors(draw):
    """q [h, d, e], k [g, d, e] (even e), and a layout over some or all of the head dims."""
    g = draw(st.integers(1, 2))
    r = draw(st.sampled_from([1, 2, 3]))
    e = 2 * draw(st.integers(1, 4))
    d = draw(st.integers(4, 20))
    rotated = 2 * draw(st.integers(1, e // 2))
    pairing = draw(st.sampled_from([HALF_SPLIT, ADJACENT]))
    base = draw(st.sampled_from([10.0, 1e4, 1e6]))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    q = rng.standard_normal((g * r, d, e)).astype(np.float32)
    k = rng.standard_normal((g, d, e)).astype(np.float32)
    return q, k, make_layout(e, rotated, default_inv_freq(base, rotated), pairing)


OFFSETS = st.lists(st.integers(-5000, 5000), min_size=1, max_size=5, unique=True)


@settings(max_examples=50, deadline=None)
@given(rotary_factors(), OFFSETS)
def test_factored_offset_stats_match_explicit_reference(fx, offsets) -> None:
    q, k, lay = fx
    r = q.shape[0] // k.shape[0]
    for o, st_o in zip(offsets, offset_head_stats(q, k, lay, offsets)):
        for h in range(q.shape[0]):
            m = offset_form(q[h], k[h // r], lay, o)  # explicit d x d, float64
            assert abs(st_o.symmetry[h] - symmetry_ref(m)) < 1e-5
            d_fact = st_o.directionality()[0][h]
            assert abs(d_fact - directionality_ref(m)) < dir_tol(m)
            np.testing.assert_allclose(st_o.frob2[h], (m**2).sum(), rtol=1e-5)


@settings(max_examples=30, deadline=None)
@given(rotary_factors(), OFFSETS)
def test_offset_symmetry_equals_the_full_kernel(fx, offsets) -> None:
    q, k, lay = fx
    full = np.stack([st_o.symmetry for st_o in offset_head_stats(q, k, lay, offsets)])
    np.testing.assert_allclose(offset_symmetry(q, k, lay, offsets), full, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(rotary_factors(), OFFSETS, st.sampled_from(["factored", "explicit"]))
def test_layer_offset_stats_match_explicit_reference(fx, offsets, method) -> None:
    q, k, lay = fx
    r = q.shape[0] // k.shape[0]
    for o, st_o in zip(offsets, offset_layer_stats(q, k, lay, offsets, method=method)):
        m = sum(offset_form(q[h], k[h // r], lay, o) for h in range(q.shape[0]))
        assert abs(st_o.symmetry[0] - symmetry_ref(m)) < 1e-5
        assert abs(st_o.directionality()[0][0] - directionality_ref(m)) < dir_tol(m)


@settings(max_examples=30, deadline=None)
@given(rotary_factors())
def test_offset_zero_is_the_unrotated_form(fx) -> None:
    q, k, lay = fx
    assert np.array_equal(rotation_matrix(lay, 0), np.eye(lay.e))
    rot, plain = offset_head_stats(q, k, lay, [0])[0], head_stats(q, k)
    np.testing.assert_allclose(rot.symmetry, plain.symmetry, atol=1e-6)
    np.testing.assert_allclose(rot.row_norms, plain.row_norms, rtol=1e-5)
    np.testing.assert_allclose(rot.col_norms, plain.col_norms, rtol=1e-5)
    np.testing.assert_allclose(offset_layer_stats(q, k, lay, [0])[0].symmetry, layer_stats(q, k).symmetry, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(rotary_factors(), OFFSETS)
def test_unrotated_dims_are_offset_independent(fx, offsets) -> None:
    """Factors living only on the unrotated dims of a partial-rotary head give the same form at every offset."""
    q, k, lay = fx
    keep = np.zeros(lay.e, dtype=bool)
    keep[lay.unrotated] = True
    q0, k0 = q * keep, k * keep
    base = head_stats(q0, k0)
    for st_o in offset_head_stats(q0, k0, lay, offsets):
        np.testing.assert_allclose(st_o.frob2, base.frob2, rtol=1e-5)
        np.testing.assert_allclose(st_o.symmetry, base.symmetry, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(rotary_factors(), st.integers(1, 5000))
def test_q_equals_k_is_symmetric_at_zero_and_transposes_with_the_sign_of_the_offset(fx, o) -> None:
    """Q = K (a symmetric init): M_0 = Q Q^T (s = 1) and M_{-o} = Q G(o)^T Q^T = M_o^T."""
    q, _, lay = fx
    k = q[:1]
    q = q[:1]
    s0, s_pos, s_neg = offset_head_stats(q, k, lay, [0, o, -o])
    assert s0.symmetry[0] == pytest.approx(1.0, abs=1e-6)
    assert s_pos.symmetry[0] == pytest.approx(s_neg.symmetry[0], abs=1e-5)
    np.testing.assert_allclose(s_pos.row_norms, s_neg.col_norms, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(offset_form(q[0], k[0], lay, -o), offset_form(q[0], k[0], lay, o).T, atol=1e-9)


def test_rotation_is_the_rope_convention() -> None:
    """q_m . k_n with q_m, k_n rotated as rotate_half does equals q G(m - n) k^T."""
    rng = np.random.default_rng(0)
    e = 8
    lay = make_layout(e, e, default_inv_freq(100.0, e), HALF_SPLIT)
    q, k = rng.standard_normal(e), rng.standard_normal(e)

    def rope(x: np.ndarray, pos: int) -> np.ndarray:
        ang = np.concatenate([pos * lay.inv_freq] * 2)
        half = np.concatenate([-x[e // 2 :], x[: e // 2]])
        return x * np.cos(ang) + half * np.sin(ang)

    for m, n in [(0, 0), (5, 2), (2, 5), (300, 17)]:
        assert rope(q, m) @ rope(k, n) == pytest.approx(q @ rotation_matrix(lay, m - n) @ k, rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(rotary_factors())
def test_pair_usage_against_explicit_blocks(fx) -> None:
    q, k, lay = fx
    use = pair_usage(q, k, lay)
    r = q.shape[0] // k.shape[0]
    np.testing.assert_allclose(use["share"].sum(axis=1), 1.0, rtol=1e-9)
    blocks = [[a, b] for a, b in zip(lay.a, lay.b)] + [list(lay.unrotated)]
    for h in range(q.shape[0]):
        for j, idx in enumerate(blocks):
            if not idx:
                assert use["energy"][h, j] == 0
                continue
            m = q[h][:, idx].astype(np.float64) @ k[h // r][:, idx].astype(np.float64).T
            np.testing.assert_allclose(use["energy"][h, j], (m**2).sum(), rtol=1e-4)
            assert abs(use["symmetry"][h, j] - symmetry_ref(m)) < 1e-4


def test_explicit_stats_of_offset_form_agree_on_a_larger_head() -> None:
    rng = np.random.default_rng(3)
    q, k = rng.standard_normal((4, 64, 16)).astype(np.float32), rng.standard_normal((2, 64, 16)).astype(np.float32)
    lay = make_layout(16, 16, default_inv_freq(1e4, 16), ADJACENT)
    for o, st_o in zip([3, 4096], offset_head_stats(q, k, lay, [3, 4096])):
        ref = explicit_stats(np.stack([offset_form(q[h], k[h // 2], lay, o) for h in range(4)]))
        np.testing.assert_allclose(st_o.row_norms, ref.row_norms, rtol=1e-4)
        np.testing.assert_allclose(st_o.col_norms, ref.col_norms, rtol=1e-4)


@pytest.mark.parametrize("bad", [[], [1, 1], [1.5], ["3"], [2**31], [-(2**31)], [True]])
def test_check_offsets_refuses(bad) -> None:
    with pytest.raises(InputError):
        check_offsets(bad)


@pytest.mark.parametrize("spec,want", [("0,1,16", [0, 1, 16]), (" -3, 4 ", [-3, 4]), ("log:0:8:4", [0, 1, 3, 8]),
                                       ("log:1:1000:4", [1, 10, 100, 1000])])
def test_parse_offsets(spec: str, want: list[int]) -> None:
    assert parse_offsets(spec) == want


@pytest.mark.parametrize("spec", ["", "1,,2", "a", "1,1", "log:0:8", "log:8:0:4", "log:0:8:1", "3000000000",
                                  "log:0:3000000000:4", "1.5"])
def test_parse_offsets_refuses(spec: str) -> None:
    with pytest.raises(InputError):
        parse_offsets(spec)


def test_layout_refuses_bad_pairs() -> None:
    with pytest.raises(ConfigError):
        make_layout(8, 10, default_inv_freq(1e4, 10), HALF_SPLIT)
    with pytest.raises(ConfigError):
        default_inv_freq(1.0, 8)
