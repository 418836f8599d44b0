"""The mean-field map: two evaluations of the column average, hand-computed small cases,
numba vs numpy, checkpoints."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.dynamics import meanfield as mfm
from attnscope.dynamics import model as dm
from attnscope.dynamics.simulate import advance, make_state
from attnscope.errors import FormatError


@settings(max_examples=40, deadline=None)
@given(M=st.integers(1, 5), P=st.integers(1, 3), n_seg=st.integers(1, 8), seg=st.integers(1, 40),
       seed=st.integers(0, 10**6))
def test_pattern_form_equals_segment_form(M, P, n_seg, seg, seed):
    cfg = dm.random_config(M, P, n_segments=n_seg, segment_length=seg, seed=seed)
    mf = mfm.compile_config(cfg)
    rng = np.random.default_rng(seed + 1)
    A = rng.uniform(-1, 1, size=(6, M))
    beta = rng.uniform(0, 3, size=6)
    a = mfm.average_patterns(mf, beta, A)
    # segment form written out: (1/n_seg) sum_s sigma^a_{b,s} tanh(beta sum_c sigma^o_{c,s} A_c)
    b = np.zeros_like(a)
    for i in range(6):
        for ai, name in enumerate(dm.MATRICES):
            for row in range(M):
                b[i, ai, row] = sum(cfg.columns[name][row, s] * math.tanh(beta[i] * float(cfg.columns["o"][:, s] @ A[i]))
                                    for s in range(n_seg)) / n_seg
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)
    np.testing.assert_allclose(mfm.average_columns(cfg, beta, A), b, rtol=0, atol=1e-12)
    assert mf.U.shape[0] <= 2 ** (M - 1)


@settings(max_examples=30, deadline=None)
@given(M=st.integers(1, 4), n=st.integers(1, 30), seed=st.integers(0, 10**6))
def test_pattern_form_equals_direct_column_mean_full_matrices(M, n, seed):
    rng = np.random.default_rng(seed)
    W = {a: rng.choice([-1, 1], size=(M, n + 2)).tolist() for a in dm.MATRICES}
    cfg = dm.from_dict({"features": M, "positional_bits": 2, "gamma": 1.0, "weights": {a: {"full": W[a]} for a in W}})
    mf = mfm.compile_config(cfg)
    A = rng.uniform(-1, 1, size=(3, M))
    beta = rng.uniform(0, 3, size=3)
    Wo = np.asarray(W["o"], float)[:, :n]
    direct = np.stack([np.stack([(np.asarray(W[a], float)[:, :n] * np.tanh(beta[i] * (A[i] @ Wo))).mean(axis=1)
                                 for a in dm.MATRICES]) for i in range(3)])
    np.testing.assert_allclose(mfm.average_patterns(mf, beta, A), direct, rtol=0, atol=1e-12)


def _cfg1(P, eps, beta, gamma=2.0, so=1, sv=-1, sq=1, sk=-1, pe=(1, -1, 1, 1)):
    return dm.from_dict({
        "features": 1, "positional_bits": P, "eps": eps, "gamma": gamma, "beta_o": beta, "segment_length": 5,
        "weights": {a: {"segments": [[s]], "positional": [[p] * P] if P else []}
                    for a, s, p in zip(dm.MATRICES, (so, sv, sq, sk), pe)}})


def test_hand_computed_M1_C1():
    """M = 1, C = 1 (P = 0): A_t = m^v_t = sv tanh(beta so A_{t-1}), A_0 = sv so (x_0 = row of W^o)."""
    beta = 0.7
    cfg = _cfg1(0, 0.0, beta)
    mf = mfm.compile_config(cfg)
    assert mf.C == 1
    state = mfm.initial_state(mf, 1)
    A = 1 * -1.0  # m^v_0 = (1/N) sum W^v x_0 = sv * so
    np.testing.assert_allclose(state.A[0, 0], A)
    out = mfm.simulate_reference(mf, state, *mfm.params_arrays(cfg), 5)
    for t in range(5):
        mo = 1 * math.tanh(beta * 1 * A)  # m^o_se = so tanh(beta so A)
        A = -1 * math.tanh(beta * 1 * A)
        assert out["mo_se"][0, t, 0] == pytest.approx(mo, abs=1e-15)
        assert out["A"][0, t, 0] == pytest.approx(A, abs=1e-15)


def test_hand_computed_M1_C2_with_positions():
    """M = 1, P = 1 (C = 2): two slots, p(t) = -1 (t even) / +1 (t odd), softmax over both."""
    beta, eps, gamma = 0.9, 0.2, 3.0
    so, sv, sq, sk = 1, -1, 1, -1
    po, pv, pq, pk = 1, -1, 1, 1
    cfg = _cfg1(1, eps, beta, gamma, so, sv, sq, sk, (po, pv, pq, pk))
    mf = mfm.compile_config(cfg)
    N = 5 + 1
    # t = 0: x_0 = row 0 of W^o: 5 bits of so, positional bit p(0) = -1
    m0 = {s_name: (5 * s * so + pw * -1) / N for s_name, s, pw in
          (("v", sv, pv), ("k", sk, pk))}
    slots = [(m0["v"], m0["k"])]
    A = m0["v"]
    state = mfm.initial_state(mf, 1)
    out = mfm.simulate_reference(mf, state, *mfm.params_arrays(cfg), 6)
    g = gamma  # sqrt(M) = 1
    for i in range(6):
        t = i + 1
        p = -1 if t % 2 == 0 else 1
        T = math.tanh(beta * so * A)
        mv = (1 - eps) * sv * T + eps * pv * p
        mk = (1 - eps) * sk * T + eps * pk * p
        mq = (1 - eps) * sq * T + eps * pq * p
        if len(slots) < 2:
            slots.append((mv, mk))
        else:
            slots[t % 2] = (mv, mk)
        w = [math.exp(g * mq * k) for _, k in slots]
        A = sum(wi * v for wi, (v, _) in zip(w, slots)) / sum(w)
        assert out["A"][0, i, 0] == pytest.approx(A, abs=1e-14)
        assert out["m"][0, i, 2, 0] == pytest.approx(mq, abs=1e-15)


@pytest.mark.parametrize("preset_beta", [[0.8, 1.255, 1.26405, 1.27, 1.4, 2.5]])
def test_numba_matches_numpy_reference(preset_beta):
    cfg = dm.load_preset("paper")
    mf = mfm.compile_config(cfg)
    beta, g, eps = mfm.params_arrays(cfg, beta_o=preset_beta, gamma=[220.0, 200, 240, 220, 220, 150],
                                     eps=[0.02, 0.0, 0.05, 0.02, 0.1, 0.02])
    s1, s2 = mfm.initial_state(mf, 6), mfm.initial_state(mf, 6)
    ref = mfm.simulate_reference(mf, s1, beta, g, eps, 30)
    obs = advance(mf, s2, beta, g, eps, 30, record=True)
    for key in ("m", "mo_se", "A"):
        np.testing.assert_allclose(obs.record[key], ref[key], rtol=0, atol=1e-12)
    np.testing.assert_allclose(s2.mv, s1.mv, atol=1e-12)
    assert s1.t == s2.t == 31


def test_random_weights_numba_matches_numpy():
    cfg = dm.random_config(M=5, P=3, n_segments=7, segment_length=3, seed=3, gamma=30.0)
    mf = mfm.compile_config(cfg)
    beta, g, eps = mfm.params_arrays(cfg, beta_o=np.linspace(0.5, 3, 5))
    s1, s2 = mfm.initial_state(mf, 5), mfm.initial_state(mf, 5)
    ref = mfm.simulate_reference(mf, s1, beta, g, eps, 25)
    obs = advance(mf, s2, beta, g, eps, 25, record=True)
    np.testing.assert_allclose(obs.record["mo_se"], ref["mo_se"], rtol=0, atol=1e-12)
    # streamed statistics equal those of the recorded series
    np.testing.assert_allclose(obs.max, ref["mo_se"].max(axis=1), atol=1e-12)
    np.testing.assert_allclose(obs.mean, ref["mo_se"].mean(axis=1), atol=1e-12)


def test_checkpoint_roundtrip_and_continuation(tmp_path):
    cfg = dm.load_preset("paper")
    mf = mfm.compile_config(cfg)
    beta, g, eps = mfm.params_arrays(cfg, beta_o=[1.3])
    s = mfm.initial_state(mf, 1)
    advance(mf, s, beta, g, eps, 399)  # t = 400, a multiple of C: slot k = oldest-first
    path = mfm.save_state(tmp_path / "ck.npz", s)
    with np.load(path) as z:
        assert z["mv_window"].shape == (4, 3) and z["att_window"].shape == (3,)
    loaded = mfm.load_state(path, mf)
    a = advance(mf, s.copy(), beta, g, eps, 20, record=True).record["mo_se"]
    b = advance(mf, loaded, beta, g, eps, 20, record=True).record["mo_se"]
    np.testing.assert_array_equal(a, b)
    # the original format (no t): continues at t = C, same phase as t = 400
    np.savez(tmp_path / "orig.npz", **{k: np.load(path)[k] for k in mfm.INIT_KEYS})
    c = advance(mf, mfm.load_state(tmp_path / "orig.npz", mf), beta, g, eps, 20, record=True).record["mo_se"]
    np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize("arrays,match", [
    ({"mv_window": np.zeros((4, 3)), "mk_window": np.zeros((4, 3)), "mq_window": np.zeros(3)}, "lacks key"),
    ({"mv_window": np.zeros((3, 3)), "mk_window": np.zeros((4, 3)), "mq_window": np.zeros(3),
      "att_window": np.zeros(3)}, r"mv_window has shape \[3, 3\], expected \[4, 3\]"),
    ({"mv_window": np.zeros((4, 3)), "mk_window": np.zeros((4, 3)), "mq_window": np.zeros(3),
      "att_window": np.zeros(2)}, "att_window has shape"),
    ({"mv_window": np.full((4, 3), np.nan), "mk_window": np.zeros((4, 3)), "mq_window": np.zeros(3),
      "att_window": np.zeros(3)}, "non-finite"),
])
def test_bad_init_state(tmp_path, arrays, match):
    p = tmp_path / "bad.npz"
    np.savez(p, **arrays)
    mf = mfm.compile_config(dm.load_preset("paper"))
    with pytest.raises(FormatError, match=match) as exc:
        make_state(mf, p, 2)
    assert "\n" not in str(exc.value)


def test_not_an_npz(tmp_path):
    p = tmp_path / "junk.npz"
    p.write_text("hello")
    with pytest.raises(FormatError, match="cannot read init-state"):
        mfm.load_state(p, mfm.compile_config(dm.load_preset("paper")))


def test_batch_inner_kernel_matches_outer_kernel():
    cfg = dm.random_config(M=3, P=2, n_segments=5, segment_length=4, seed=11, gamma=60.0)
    mf = mfm.compile_config(cfg)
    beta, g, eps = mfm.params_arrays(cfg, beta_o=np.linspace(0.2, 3.0, 21))
    s1, s2 = mfm.initial_state(mf, 21), mfm.initial_state(mf, 21)
    kw = dict(transient=5, n_tail=7, section_tol=0.05, max_section=4)
    a = advance(mf, s1, beta, g, eps, 30, kernel="outer", **kw)
    b = advance(mf, s2, beta, g, eps, 30, kernel="auto", **kw)
    for name in ("mean", "std", "min", "max", "tail"):
        np.testing.assert_allclose(getattr(b, name), getattr(a, name), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(a.n_distinct, b.n_distinct)
    assert [len(x) for x in a.section] == [len(x) for x in b.section]
    np.testing.assert_allclose(s2.A, s1.A, atol=1e-12)
    np.testing.assert_allclose(s2.mk, s1.mk, atol=1e-12)
    assert s1.t == s2.t


@settings(max_examples=15, deadline=None)
@given(M=st.integers(1, 4), P=st.integers(0, 3), n_seg=st.integers(1, 6), seed=st.integers(0, 10**6),
       B=st.integers(1, 12))
def test_kernels_match_reference_on_random_models(M, P, n_seg, seed, B):
    cfg = dm.random_config(M, P, n_segments=n_seg, segment_length=3, seed=seed, gamma=25.0,
                           eps=0.0 if P == 0 else 0.1)
    mf = mfm.compile_config(cfg)
    rng = np.random.default_rng(seed)
    beta, g, eps = mfm.params_arrays(cfg, beta_o=rng.uniform(0, 3, B))
    ref = mfm.simulate_reference(mf, mfm.initial_state(mf, B), beta, g, eps, 20)
    rec = advance(mf, mfm.initial_state(mf, B), beta, g, eps, 20, record=True).record
    # Same arithmetic in another order: rounding (1e-16) grows along a chaotic trajectory (gamma 25), and one
    # example in many missed 1e-12 by 1.8e-12 after 20 steps. A wrong kernel is off by far more than 1e-9.
    np.testing.assert_allclose(rec["A"], ref["A"], rtol=0, atol=1e-9)
    s = mfm.initial_state(mf, B)
    obs = advance(mf, s, beta, g, eps, 20, transient=0, n_tail=20)  # batch-inner kernel when B >= 8
    np.testing.assert_allclose(obs.tail, ref["mo_se"], rtol=0, atol=1e-9)
