"""Lyapunov spectra: Benettin/QR validated on maps with known exponents, the analytic tangent map
(numba) against torch autograd Jacobians, and the regime rules."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.dynamics import meanfield as mfm
from attnscope.dynamics import model as dm
from attnscope.dynamics.lyapunov import benettin, lyapunov_autograd, lyapunov_spectrum
from attnscope.dynamics.regimes import count_distinct, distinct_regime, lyapunov_regime
from attnscope.dynamics.simulate import advance
from attnscope.errors import InputError


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10**6), D=st.integers(1, 4))
def test_linear_map_exponents_are_log_abs_eigenvalues(seed, D):
    rng = np.random.default_rng(seed)
    eig = rng.uniform(0.2, 3.0, size=D) * rng.choice([-1, 1], size=D)
    eig = np.sort(np.abs(eig))[::-1] * np.sign(eig)
    if D > 1 and np.min(np.abs(np.diff(np.abs(eig)))) < 0.05:
        eig = np.abs(eig) + np.arange(D)[::-1] * 0.3
    S = rng.standard_normal((D, D)) + 3 * np.eye(D)  # a non-normal, well-conditioned basis change
    J = S @ np.diag(eig) @ np.linalg.inv(S)
    lam = benettin(lambda x, t: J @ x, lambda x, t: J, np.ones(D), 400, D, transient=50)
    np.testing.assert_allclose(lam, np.sort(np.log(np.abs(eig)))[::-1], atol=2e-2)


def test_logistic_map_r4_is_ln2():
    r = 4.0
    lam = benettin(lambda x, t: r * x * (1 - x), lambda x, t: np.array([[r * (1 - 2 * x[0])]]),
                   np.array([0.1234]), 60_000, 1, transient=100)
    assert lam[0] == pytest.approx(math.log(2), abs=0.01)


def test_logistic_map_periodic_window_negative():
    r = 3.2  # stable 2-cycle: exponent = log|f'(x1) f'(x2)| / 2 < 0
    lam = benettin(lambda x, t: r * x * (1 - x), lambda x, t: np.array([[r * (1 - 2 * x[0])]]),
                   np.array([0.3]), 2000, 1, transient=500)
    x1 = (r + 1 + math.sqrt((r - 3) * (r + 1))) / (2 * r)
    x2 = (r + 1 - math.sqrt((r - 3) * (r + 1))) / (2 * r)
    assert lam[0] == pytest.approx(math.log(abs(r * (1 - 2 * x1) * r * (1 - 2 * x2))) / 2, abs=1e-6)


@pytest.mark.parametrize("beta", [1.255, 1.27, 1.4])
def test_analytic_tangent_matches_autograd(beta):
    cfg = dm.load_preset("paper")
    mf = mfm.compile_config(cfg)
    b, g, eps = mfm.params_arrays(cfg, beta_o=[beta])
    s = mfm.initial_state(mf, 1)
    advance(mf, s, b, g, eps, 2000)  # onto the attractor
    ref = lyapunov_autograd(mf, s.copy(), b[0], g[0], eps[0], n_steps=100, k=3, seed=0)
    fast = lyapunov_spectrum(mf, s.copy(), b, g, eps, n_steps=100, k=3, seed=0)[0]
    np.testing.assert_allclose(np.sort(fast)[::-1], ref, atol=1e-8)


def test_lyapunov_batch_equals_one_by_one_and_transient_start():
    cfg = dm.random_config(M=2, P=2, n_segments=4, seed=5, gamma=20.0)
    mf = mfm.compile_config(cfg)
    b, g, eps = mfm.params_arrays(cfg, beta_o=[0.5, 1.5, 3.0])
    batch = lyapunov_spectrum(mf, mfm.initial_state(mf, 3), b, g, eps, n_steps=300, k=2, transient=100)
    for i in range(3):
        one = lyapunov_spectrum(mf, mfm.initial_state(mf, 1), b[i:i + 1], g[i:i + 1], eps[i:i + 1],
                                n_steps=300, k=2, transient=100)
        np.testing.assert_allclose(batch[i], one[0], atol=1e-13)
    with pytest.raises(InputError, match="number of exponents"):
        lyapunov_spectrum(mf, mfm.initial_state(mf, 3), b, g, eps, n_steps=10, k=9)


def test_regime_rules():
    assert lyapunov_regime([-0.01, -0.2]) == "periodic"
    assert lyapunov_regime([5e-5, -0.2]) == "quasi-periodic"
    assert lyapunov_regime([-5e-5, -0.2]) == "quasi-periodic"
    assert lyapunov_regime([0.05, -0.2]) == "chaotic"
    assert lyapunov_regime([0.05, 0.001]) == "hyperchaotic"
    assert lyapunov_regime([-np.inf, -np.inf]) == "periodic"
    assert distinct_regime(79) == "periodic" and distinct_regime(80) == "quasi-periodic"
    assert distinct_regime(2499) == "quasi-periodic" and distinct_regime(2500) == "chaotic"
    # a period-3 series has 3 distinct values; a dense one fills the bins
    assert count_distinct(np.tile([0.1, -0.3, 0.2], 100))[0] == 3
    assert count_distinct(np.linspace(-1, 1, 20000))[0] == 5001


def test_paper_regimes_from_x0():
    """Regression on the paper configuration: beta_o = 1.27 is a periodic orbit whose leading pair is
    complex (lambda_1 = lambda_2), 1.4 is chaotic, 0.5 sits on the stable fixed point."""
    from attnscope.dynamics.sweeps import lyapunov_table

    df = lyapunov_table(dm.load_preset("paper"), [0.5, 1.27, 1.4], transient=20000, steps=20000, k=2)
    lam = np.array(df["lyapunov"].tolist())
    assert list(df["regime"]) == ["periodic", "periodic", "chaotic"]
    assert lam[1, 0] == pytest.approx(-0.0478, abs=2e-3) and lam[1, 1] == pytest.approx(lam[1, 0], abs=1e-3)
    assert lam[2, 0] > 0.03
    assert np.all(lam[:, 0] >= lam[:, 1])


def test_batch_inner_lyapunov_kernel_matches_outer():
    for cfg in (dm.load_preset("paper"), dm.random_config(M=4, P=1, n_segments=6, seed=2, gamma=40.0)):
        mf = mfm.compile_config(cfg)
        b, g, eps = mfm.params_arrays(cfg, beta_o=np.linspace(0.0, 3.0, 17))
        s1, s2 = mfm.initial_state(mf, 17), mfm.initial_state(mf, 17)
        a = lyapunov_spectrum(mf, s1, b, g, eps, n_steps=60, k=3, transient=20, kernel="outer")
        c = lyapunov_spectrum(mf, s2, b, g, eps, n_steps=60, k=3, transient=20, kernel="auto")
        np.testing.assert_array_equal(np.isfinite(a), np.isfinite(c))
        fin = np.isfinite(a)
        np.testing.assert_allclose(c[fin], a[fin], rtol=0, atol=1e-8)
        np.testing.assert_allclose(s2.A, s1.A, atol=1e-12)
