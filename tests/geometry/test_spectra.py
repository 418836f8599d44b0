"""Spectra of W_qk's symmetric and antisymmetric parts: the factored 2e x 2e route against an explicit
d x d float64 reference (hypothesis: MHA/GQA/MQA, rank-deficient and badly scaled factors, rotary
offsets, layer forms), and exact cases (Q = K, Q = -K, a rank-one head, a zero head)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.families.rope import ADJACENT, HALF_SPLIT, default_inv_freq, make_layout
from attnscope.geometry.rotary import offset_form
from attnscope.geometry.spectra import (
    RTOL,
    effective_rank,
    explicit_spectra,
    head_spectra,
    layer_spectra,
    offset_head_spectra,
    offset_layer_spectra,
    signature,
    spectra_ref,
    top_energy,
)

from .test_kernels import explicit_heads, factors


def _padded(x: np.ndarray, n: int) -> np.ndarray:
    """x sorted ascending after padding with zeros to length n (eigenvalues: ties of +-x sort alike)."""
    return np.sort(np.concatenate([x, np.zeros(n - len(x))]))


def ref_columns(m: np.ndarray, rtol: float = RTOL) -> dict[str, float]:
    """The four summaries of one explicit M, from the reference spectra and the definitions written out."""
    lam, sv = spectra_ref(m)
    tol = rtol * np.sqrt((m**2).sum())
    lam = np.where(np.abs(lam) > tol, lam, 0.0)
    sv = np.where(sv > tol, sv, 0.0)

    def erank(v: np.ndarray) -> float:
        v = v[v > 0]
        if v.size == 0:
            return 0.0
        p = v / v.sum()
        return float(np.exp(-(p * np.log(p)).sum()))

    mass = np.abs(lam).sum()
    return {"sym_rank": erank(np.abs(lam)), "anti_rank": erank(sv),
            "sym_signature": float(lam.sum() / mass) if mass > 0 else 0.0,
            "anti_top2": float((np.sort(sv)[::-1][:2] ** 2).sum() / (sv**2).sum()) if (sv**2).sum() > 0 else 0.0}


def assert_matches_reference(sp, i: int, m: np.ndarray) -> None:
    """Spectrum i of ``sp`` equals M's (to 1e-6 of ||M||_F), and so do its four summaries."""
    lam, sv = spectra_ref(m)
    n = max(len(lam), sp.sym.shape[1])
    scale = max(np.sqrt((m**2).sum()), 1e-300)
    np.testing.assert_allclose(_padded(sp.sym[i], n), _padded(lam, n), atol=1e-6 * scale, rtol=0)
    np.testing.assert_allclose(_padded(sp.anti[i], n), _padded(sv, n), atol=1e-6 * scale, rtol=0)
    tol = RTOL * scale
    near = np.concatenate([np.abs(lam), sv])
    if np.any(np.abs(near - tol) < 0.5 * tol):  # a value sitting on the zero threshold: either side is right
        return
    ref = ref_columns(m)
    got = {name: float(v[i]) for name, v in sp.columns().items()}
    for name in ref:
        assert got[name] == pytest.approx(ref[name], abs=1e-4 * max(1.0, ref[name])), name


@settings(max_examples=60, deadline=None)
@given(factors())
def test_head_spectra_match_explicit_reference(qk) -> None:
    q, k = qk
    sp = head_spectra(q, k)
    for h, m in enumerate(explicit_heads(q, k)):  # the kv map written out by hand
        assert_matches_reference(sp, h, m)


@st.composite
def degenerate_factors(draw):
    """Factors with Q = K, Q = -K, Q in span(K), a zero column block, or a zero head: singular Grams."""
    d, e = draw(st.integers(4, 16)), draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    k = rng.standard_normal((1, d, e)).astype(np.float32)
    kind = draw(st.sampled_from(["equal", "negative", "span", "zero_col", "zero"]))
    if kind == "equal":
        q = k.copy()
    elif kind == "negative":
        q = -k
    elif kind == "span":
        q = (k[0] @ rng.standard_normal((e, e)))[None].astype(np.float32)
    elif kind == "zero_col":
        q = rng.standard_normal((1, d, e)).astype(np.float32)
        q[..., 0] = 0
        k[..., -1] = 0
    else:
        q, k = np.zeros_like(k), np.zeros_like(k)
    return q, k, kind


@settings(max_examples=60, deadline=None)
@given(degenerate_factors())
def test_singular_grams_match_reference(qkk) -> None:
    q, k, kind = qkk
    sp = head_spectra(q, k)
    m = q[0].astype(np.float64) @ k[0].astype(np.float64).T
    assert_matches_reference(sp, 0, m)
    if kind == "equal":  # symmetric: no routing part, S positive semi-definite
        assert sp.anti_rank[0] == 0 and sp.anti_top2[0] == 0 and sp.sym_signature[0] == pytest.approx(1.0)
    if kind == "negative":
        assert sp.anti_rank[0] == 0 and sp.sym_signature[0] == pytest.approx(-1.0)
    if kind == "zero":
        assert sp.sym_rank[0] == sp.anti_rank[0] == sp.sym_signature[0] == sp.anti_top2[0] == 0


def test_rank_one_head_exact() -> None:
    """M = u v^T: A has one rotation plane (rank 2, top-2 energy 1), S's signature is cos(u, v)."""
    rng = np.random.default_rng(3)
    u, v = rng.standard_normal((2, 9, 1)).astype(np.float32)
    sp = head_spectra(u[None], v[None])
    assert sp.anti_rank[0] == pytest.approx(2.0, abs=1e-6)
    assert sp.anti_top2[0] == pytest.approx(1.0, abs=1e-9)
    cos = float((u[:, 0] @ v[:, 0]) / np.linalg.norm(u) / np.linalg.norm(v))
    assert sp.sym_signature[0] == pytest.approx(cos, abs=1e-6)
    assert 1.0 <= sp.sym_rank[0] <= 2.0


@settings(max_examples=30, deadline=None)
@given(factors(), st.floats(1e-3, 1e3))
def test_transpose_and_scale_invariance(qk, c) -> None:
    """M^T (q and k swapped) has the same S and A spectra; ranks, signature and top-2 do not see a scale."""
    q, k = qk
    q, k = q[: k.shape[0]], k  # one head per kv head: a swap keeps the pairing
    a, b = head_spectra(q, k), head_spectra(k, q)
    np.testing.assert_allclose(a.anti, b.anti, atol=1e-6 * a.frob.max())
    np.testing.assert_allclose(np.sort(a.sym), np.sort(b.sym), atol=1e-6 * a.frob.max())
    scaled = head_spectra((c * q).astype(np.float32), k)
    for name, vals in a.columns().items():
        np.testing.assert_allclose(scaled.columns()[name], vals, atol=1e-3, err_msg=name)


def test_gqa_pairing_uses_the_family_map() -> None:
    """Query head h pairs with kv head h // (n_q / n_kv), not h mod n_kv: heads 0, 1 share k[0]."""
    rng = np.random.default_rng(0)
    q = rng.standard_normal((4, 10, 3)).astype(np.float32)
    k = rng.standard_normal((2, 10, 3)).astype(np.float32)
    sp = head_spectra(q, k)
    right = spectra_ref(q[1].astype(np.float64) @ k[0].astype(np.float64).T)[1]
    wrong = spectra_ref(q[1].astype(np.float64) @ k[1].astype(np.float64).T)[1]
    np.testing.assert_allclose(sp.anti[1], right[:6], atol=1e-5)
    assert not np.allclose(sp.anti[1], wrong[:6], atol=1e-3)


@settings(max_examples=40, deadline=None)
@given(factors(), st.sampled_from(["factored", "explicit", "auto"]))
def test_layer_spectra_match_reference(qk, method) -> None:
    q, k = qk
    assert_matches_reference(layer_spectra(q, k, method=method), 0, sum(explicit_heads(q, k)))


def test_cross_attention_is_nan() -> None:
    rng = np.random.default_rng(0)
    sp = head_spectra(rng.standard_normal((2, 6, 3)), rng.standard_normal((2, 8, 3)))
    assert np.isnan(sp.sym_rank).all() and np.isnan(sp.anti_rank).all()


@st.composite
def rotary_factors(draw):
    g, r = draw(st.integers(1, 2)), draw(st.sampled_from([1, 2, 3]))
    e = 2 * draw(st.integers(1, 4))
    d = draw(st.integers(4, 20))
    rotated = 2 * draw(st.integers(1, e // 2))
    pairing = draw(st.sampled_from([HALF_SPLIT, ADJACENT]))
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    q = rng.standard_normal((g * r, d, e)).astype(np.float32)
    k = rng.standard_normal((g, d, e)).astype(np.float32)
    return q, k, make_layout(e, rotated, default_inv_freq(draw(st.sampled_from([10.0, 1e4])), rotated), pairing)


OFFSETS = st.lists(st.integers(-3000, 3000), min_size=1, max_size=4, unique=True)


@settings(max_examples=40, deadline=None)
@given(rotary_factors(), OFFSETS)
def test_offset_spectra_are_those_of_the_rotated_form(fx, offsets) -> None:
    q, k, lay = fx
    r = q.shape[0] // k.shape[0]
    for o, sp in zip(offsets, offset_head_spectra(q, k, lay, offsets)):
        for h in range(q.shape[0]):
            assert_matches_reference(sp, h, offset_form(q[h], k[h // r], lay, o))


@settings(max_examples=25, deadline=None)
@given(rotary_factors(), OFFSETS, st.sampled_from(["factored", "explicit"]))
def test_offset_layer_spectra(fx, offsets, method) -> None:
    q, k, lay = fx
    r = q.shape[0] // k.shape[0]
    for o, sp in zip(offsets, offset_layer_spectra(q, k, lay, offsets, method=method)):
        m = sum(offset_form(q[h], k[h // r], lay, o) for h in range(q.shape[0]))
        assert_matches_reference(sp, 0, m)


def test_offset_zero_is_the_unrotated_form() -> None:
    rng = np.random.default_rng(1)
    q, k = rng.standard_normal((4, 12, 4)).astype(np.float32), rng.standard_normal((2, 12, 4)).astype(np.float32)
    lay = make_layout(4, 4, default_inv_freq(1e4, 4), HALF_SPLIT)
    at0, plain = offset_head_spectra(q, k, lay, [0])[0], head_spectra(q, k)
    np.testing.assert_allclose(at0.sym, plain.sym, atol=1e-9)
    np.testing.assert_allclose(at0.anti, plain.anti, atol=1e-9)


def test_summaries_by_definition() -> None:
    assert effective_rank(np.array([1.0, 1.0, 1.0, 0.0])) == pytest.approx(3.0)
    assert effective_rank(np.array([5.0, 0.0])) == pytest.approx(1.0)
    assert effective_rank(np.zeros(3)) == 0.0
    assert 1.0 < effective_rank(np.array([2.0, 1.0])) < 2.0
    assert signature(np.array([3.0, -1.0])) == pytest.approx(0.5)
    assert signature(np.zeros(2)) == 0.0
    assert top_energy(np.array([1.0, 3.0, 1.0, 1.0]), 2) == pytest.approx(10 / 12)
    assert top_energy(np.zeros(4), 2) == 0.0


def test_explicit_route_agrees_with_factored() -> None:
    rng = np.random.default_rng(2)
    q, k = rng.standard_normal((1, 30, 4)).astype(np.float32), rng.standard_normal((1, 30, 4)).astype(np.float32)
    a, b = head_spectra(q, k), explicit_spectra(q[0].astype(np.float64) @ k[0].astype(np.float64).T)
    np.testing.assert_allclose(a.sym, b.sym[:, :8], atol=1e-6 * a.frob[0])
    np.testing.assert_allclose(a.anti, b.anti[:, :8], atol=1e-6 * a.frob[0])


@pytest.mark.parametrize("eps", [1e-3, 1e-5])
def test_nearly_symmetric_heads_take_float64_grams(eps) -> None:
    """Q = K + a small perturbation beside an ordinary head, in one batch: the near-deficient span gets float64
    Grams (float32 ones would move its small routing singular values by ~sqrt(eps32)), the other head float32."""
    from attnscope.geometry.spectra import _balanced_gram, _gram_factor, _head_grams

    rng = np.random.default_rng(5)
    k = rng.standard_normal((1, 64, 16)).astype(np.float32)
    q = np.concatenate([k + eps * rng.standard_normal(k.shape), rng.standard_normal(k.shape)]).astype(np.float32)
    assert _gram_factor(_balanced_gram(*_head_grams(q, k, np.float32))[0])[1].tolist() == [False, True]
    sp = head_spectra(q, k)
    for h in range(2):
        assert_matches_reference(sp, h, q[h].astype(np.float64) @ k[0].astype(np.float64).T)
    assert 0 < sp.anti_rank[0] and sp.sym_signature[0] > 0.99
