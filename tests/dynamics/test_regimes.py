"""Regime labels: block errors of the Lyapunov estimate (against explicit references), the
error-following classification on maps with known regimes, and the paper's values at the default."""

from __future__ import annotations

import numpy as np
import pytest

from attnscope.dynamics import bifurcation, load_preset
from attnscope.dynamics import meanfield as mfm
from attnscope.dynamics.lyapunov import benettin, block_estimate, lyapunov_estimate
from attnscope.dynamics.regimes import BIAS_LOG, classify, count_distinct, lyapunov_regime

N_SAVED = 20_000  # saved steps behind a diagram's distinct count and section


def test_block_estimate_matches_explicit_loop():
    rng = np.random.default_rng(0)
    n_steps, blocks = 103, 7
    logs = rng.normal(0.01, 0.3, size=(2, 3, n_steps))  # [B, K, steps] log stretch factors
    sums = np.zeros((2, 3, blocks))
    for i in range(n_steps):
        sums[:, :, i * blocks // n_steps] += logs[:, :, i]
    est = block_estimate(sums, n_steps)
    for b in range(2):
        ref = []
        for k in range(3):
            means = [np.mean(logs[b, k, [i for i in range(n_steps) if i * blocks // n_steps == j]])
                     for j in range(blocks)]
            ref.append((np.mean(logs[b, k]), np.std(means, ddof=1) / np.sqrt(blocks)))
        ref.sort(key=lambda r: -r[0])
        np.testing.assert_allclose(est.exponents[b], [r[0] for r in ref], rtol=1e-12)
        np.testing.assert_allclose(est.error[b], [r[1] for r in ref], rtol=1e-12)


@pytest.mark.parametrize("kernel,B", [("outer", 3), ("auto", 9)])
def test_kernel_blocks_sum_to_the_plain_estimate(kernel, B):
    cfg = load_preset("paper")
    mf = mfm.compile_config(cfg)
    b, g, eps = mfm.params_arrays(cfg, beta_o=np.linspace(1.0, 1.5, B))
    one = lyapunov_estimate(mf, mfm.initial_state(mf, B), b, g, eps, n_steps=400, k=2, transient=50,
                            blocks=1, kernel=kernel)
    ten = lyapunov_estimate(mf, mfm.initial_state(mf, B), b, g, eps, n_steps=400, k=2, transient=50,
                            blocks=10, kernel=kernel)
    np.testing.assert_allclose(ten.exponents, one.exponents, rtol=1e-10, atol=1e-14)
    assert np.all(np.isinf(one.error)) and np.all(np.isfinite(ten.error)) and np.all(ten.error >= 0)


def _logistic(r):
    return (lambda x, i: r * x * (1 - x)), (lambda x, i: np.array([[r * (1 - 2 * x[0])]]))


def _circle(K=0.5, omega=(np.sqrt(5) - 1) / 2):
    """Arnold circle map at the golden mean: quasi-periodic, lambda = 0 exactly, finite-time wobble."""
    step = lambda x, i: (x + omega - K / (2 * np.pi) * np.sin(2 * np.pi * x)) % 1.0  # noqa: E731
    jac = lambda x, i: np.array([[1 - K * np.cos(2 * np.pi * x[0])]])  # noqa: E731
    return step, jac


def _label(step, jac, x0, observe, section, n_lyap=5000):
    """The diagram's inputs for a 1-D map: block-error exponent, distinct count, section hits."""
    est = benettin(step, jac, np.array([x0]), n_lyap, 1, transient=500, blocks=10)
    x, series = np.array([x0]), np.empty(N_SAVED)
    for i in range(2000 + N_SAVED):
        x = step(x, i)
        if i >= 2000:
            series[i - 2000] = observe(x[0])
    n_sec = int(np.sum(section(series)))
    return classify(est.exponents[0], est.error[0], n_lyap, count_distinct(series)[0], min(n_sec, 300))


def test_known_maps_get_their_regime():
    on_circle = (lambda th: np.cos(2 * np.pi * th), lambda y: np.abs(y) <= 0.02)
    on_line = (lambda x: x - 0.5, lambda y: np.abs(y) <= 0.005)
    assert _label(*_logistic(3.2), 0.3, *on_line) == "periodic"  # period 2, lambda = log 0.16 / 2
    assert _label(*_logistic(3.5), 0.3, *on_line) == "periodic"  # period 4
    assert _label(*_circle(), 0.1, *on_circle) == "quasi-periodic"  # an invariant circle
    assert _label(*_logistic(4.0), 0.3, *on_line) == "chaotic"  # lambda = log 2


def test_threshold_follows_the_error_and_shrinks_like_one_over_t():
    # the default-run estimates of the two paper tori: within their error of 0
    assert lyapunov_regime([-6.8e-4, -8e-3], [6.3e-4, 2e-4], 4500) == "quasi-periodic"
    assert lyapunov_regime([3.7e-4, -1e-2], [2.3e-4, 7e-4], 4500) == "quasi-periodic"
    # the same exponent, known exactly, is resolved once BIAS_LOG / T is below it
    lam = 3e-4
    assert lyapunov_regime([lam], [0.0], int(BIAS_LOG / lam) - 100) == "quasi-periodic"
    assert lyapunov_regime([lam], [0.0], int(BIAS_LOG / lam) + 100) == "chaotic"
    assert lyapunov_regime([-lam], [0.0], 10 * int(BIAS_LOG / lam)) == "periodic"
    # a large statistical error keeps a positive estimate unresolved
    assert lyapunov_regime([0.01, -0.1], [0.005, 0.001], 50_000) == "quasi-periodic"
    assert lyapunov_regime([0.05, 0.01], [0.001, 0.001], 50_000) == "hyperchaotic"
    # without an error: the original fixed 1e-4 threshold
    assert lyapunov_regime([5e-5]) == "quasi-periodic" and lyapunov_regime([2e-4]) == "chaotic"


def test_disagreement_is_uncertain_never_a_confident_colour():
    assert classify([0.1, -0.1], [1e-3, 1e-3], 4500, n_distinct=12, n_section=0) == "uncertain"
    assert classify([1e-4, -0.1], [1e-3, 1e-3], 4500, n_distinct=3000, n_section=20) == "uncertain"
    assert classify([1e-4, -0.1], [1e-3, 1e-3], 4500, n_distinct=1200, n_section=300) == "uncertain"
    assert classify([1e-4, -0.1], [1e-3, 1e-3], 4500, n_distinct=12, n_section=0) == "periodic"
    assert classify([1e-4, -0.1], [1e-4, 1e-3], 4500, n_distinct=4900, n_section=250) == "quasi-periodic"
    assert classify([-0.01, -0.1], [1e-4, 1e-3], 4500, n_distinct=4000, n_section=0) == "periodic"
    assert classify([0.1, -0.1], [1e-3, 1e-3], 4500, n_distinct=4000, n_section=30) == "chaotic"


def test_paper_values_at_the_default():
    """The paper's trajectory values through the default diagram (protocol from 1.28, 120,000 steps,
    5000 Lyapunov steps): the two tori are quasi-periodic, not periodic/chaotic as with a fixed 1e-4."""
    values = [1.255, 1.26405, 1.266, 1.27, 1.28]
    res = bifurcation(load_preset("paper"), values)
    assert list(res.table["regime"]) == ["quasi-periodic", "quasi-periodic", "chaotic", "periodic", "chaotic"]
    tori = res.table.iloc[:2]
    assert np.all(np.abs(tori["lambda_1"]) < 2.5 * tori["lambda_1_err"] + BIAS_LOG / 4500)
