"""Lyapunov spectra: Benettin/QR on the exact one-step Jacobian.

Owns the generic reference :func:`benettin` (any map given as step + Jacobian, used to validate on
maps with known exponents), the torch-autograd Jacobian of the mean-field step (an independent check
of the analytic tangent map in :mod:`attnscope.dynamics.kernels`), and :func:`lyapunov_estimate` /
:func:`lyapunov_spectrum`, the fast path vectorised over parameter values. Exponents are per step,
descending; :func:`block_estimate` turns block sums of log stretch factors into exponents and their
standard errors (the spread of the block averages), which the regime labels need. The state of one
value is (m^v window, m^k window, A), D = 2CM + M; at most C*M exponents are finite (the window is a
function of the last C values of A).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from attnscope.errors import InputError
from attnscope.interrupts import native_call

from .meanfield import MeanField, State


@dataclass
class LyapunovEstimate:
    """Finite-time exponents and their error, from block averages of the Benettin sums.

    ``exponents`` [B, K] per step, descending per value; ``error`` [B, K] the standard error of each
    mean from the spread of the ``blocks`` consecutive block averages (std / sqrt(blocks), ddof 1):
    it shrinks like 1/T for a torus or a periodic orbit and like 1/sqrt(T) for chaos. 0 where an
    exponent is -inf (a superstable orbit).
    """

    exponents: np.ndarray  # [B, K]
    error: np.ndarray  # [B, K]
    blocks: int


def benettin(step_fn: Callable[[np.ndarray, int], np.ndarray],
             jac_fn: Callable[[np.ndarray, int], np.ndarray],
             x0: np.ndarray, n_steps: int, k: int, *, transient: int = 0, seed: int = 0,
             blocks: int = 1) -> "np.ndarray | LyapunovEstimate":
    """Leading ``k`` exponents of x_{t+1} = step_fn(x_t, t): dx <- J dx; QR; sum log|diag R| / steps.

    ``blocks`` > 1: a :class:`LyapunovEstimate` (exponents and their block error) instead of the array.
    """
    x = np.array(x0, dtype=np.float64)
    D = x.size
    if not 1 <= k <= D:
        raise InputError(f"number of exponents must be in 1..{D}, got {k}")
    blocks = max(1, min(int(blocks), int(n_steps)))
    Qm, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((D, k)))
    sums = np.zeros((1, k, blocks))
    for i in range(transient + n_steps):
        J = jac_fn(x, i)
        x = step_fn(x, i)
        Qm, R = np.linalg.qr(J @ Qm)
        if i >= transient:
            sums[0, :, (i - transient) * blocks // n_steps] += np.log(np.abs(np.diag(R)))
    est = block_estimate(sums, n_steps)
    return est if blocks > 1 else est.exponents[0]


def _torch_step(mf: MeanField, beta: float, g: float, eps: float):
    """The mean-field step on the flattened state (torch float64), for autograd Jacobians."""
    import torch

    C, M = mf.C, mf.M
    U = torch.as_tensor(mf.U)
    Cf = torch.as_tensor(mf.Cf)
    pos = torch.as_tensor(mf.pos)

    def f(x: "torch.Tensor", t: int) -> "torch.Tensor":
        mv = x[: C * M].reshape(C, M)
        mk = x[C * M: 2 * C * M].reshape(C, M)
        A = x[2 * C * M:]
        T = torch.tanh(beta * (U @ A))  # [K']
        m = (1 - eps) * torch.einsum("amk,k->am", Cf, T) + eps * pos[:, t % C]
        phi = t % C
        onehot = torch.zeros(C, 1, dtype=x.dtype)
        onehot[phi] = 1.0
        mv = mv * (1 - onehot) + onehot * m[1]
        mk = mk * (1 - onehot) + onehot * m[3]
        n = min(C, t + 1)
        p = torch.softmax(g * (mk[:n] @ m[2]), dim=0)
        A2 = p @ mv[:n]
        return torch.cat([mv.reshape(-1), mk.reshape(-1), A2])

    return f


def lyapunov_autograd(mf: MeanField, state: State, beta: float, g: float, eps: float, *,
                      n_steps: int, k: int, transient: int = 0, seed: int = 0) -> np.ndarray:
    """Reference spectrum of one value: torch.func.jacrev Jacobians + numpy QR (slow, for tests)."""
    import torch

    f = _torch_step(mf, float(beta), float(g), float(eps))
    t0 = state.t
    x0 = np.concatenate([state.mv[0].ravel(), state.mk[0].ravel(), state.A[0]])

    def step_fn(x, i):
        with torch.no_grad():
            return f(torch.as_tensor(x), t0 + i).numpy()

    def jac_fn(x, i):
        return torch.func.jacrev(lambda y: f(y, t0 + i))(torch.as_tensor(x)).numpy()

    return benettin(step_fn, jac_fn, x0, n_steps, k, transient=transient, seed=seed)


def initial_tangents(D: int, k: int, seed: int = 0) -> np.ndarray:
    """k orthonormal rows [k, D] from a fixed seed (generic directions, reproducible)."""
    Qm, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((D, k)))
    return np.ascontiguousarray(Qm.T)


def lyapunov_estimate(mf: MeanField, state: State, beta: np.ndarray, g: np.ndarray, eps: np.ndarray,
                      *, n_steps: int, k: int = 2, transient: int = 0, blocks: int = 10, seed: int = 0,
                      kernel: str = "auto") -> LyapunovEstimate:
    """Leading k exponents and their block error for every value in the batch (numba, parallel).

    ``n_steps`` counts the averaging steps, split into ``blocks`` equal blocks; ``transient`` steps run
    first (state and tangents) unaveraged; the state advances in place. kernel ``auto``: the
    batch-innermost (SIMD) kernel for 8+ values, ``outer`` forces the per-value one.
    """
    from .kernels import lyapunov_batch, lyapunov_batch_inner

    D = 2 * mf.C * mf.M + mf.M
    if not 1 <= k <= mf.C * mf.M:
        raise InputError(f"number of exponents must be in 1..{mf.C * mf.M} (C*M) for this model, got {k}")
    if n_steps < 1 or transient < 0:
        raise InputError("Lyapunov spectra need steps >= 1 and transient >= 0")
    blocks = max(1, min(int(blocks), int(n_steps)))
    B = state.A.shape[0]
    sums = np.zeros((B, k, blocks))
    Q0 = initial_tangents(D, k, seed)
    if B < 8 or kernel == "outer":
        with native_call():  # hours of numba: SIGTERM / Ctrl-C must still stop it
            lyapunov_batch(mf.U, mf.Cf, mf.pos, beta, g, eps, state.mv, state.mk, state.A, state.t,
                           transient + n_steps, transient, Q0, sums)
    else:
        import numba

        mvT = np.ascontiguousarray(state.mv.transpose(1, 2, 0))
        mkT = np.ascontiguousarray(state.mk.transpose(1, 2, 0))
        AT = np.ascontiguousarray(state.A.T)
        with native_call():
            lyapunov_batch_inner(mf.U, mf.Cf, mf.pos, beta, g, eps, mvT, mkT, AT, state.t, transient + n_steps,
                                 transient, Q0, max(1, min(B // 4, numba.get_num_threads())), sums)
        state.mv[...] = mvT.transpose(2, 0, 1)
        state.mk[...] = mkT.transpose(2, 0, 1)
        state.A[...] = AT.T
    state.t += transient + n_steps
    return block_estimate(sums, n_steps)


def block_estimate(sums: np.ndarray, n_steps: int) -> LyapunovEstimate:
    """Exponents (descending per value) and their standard errors from block sums [B, K, blocks] of
    log stretch factors over ``n_steps`` averaged steps (block j holds steps i with i*blocks//n_steps = j)."""
    B, k, blocks = sums.shape
    lam = sums.sum(axis=2) / n_steps  # [B, K]
    sizes = np.bincount(np.arange(n_steps) * blocks // n_steps, minlength=blocks)  # [blocks]
    with np.errstate(invalid="ignore"):
        means = sums / sizes  # [B, K, blocks]
        err = means.std(axis=2, ddof=1) / np.sqrt(blocks) if blocks > 1 else np.full_like(lam, np.inf)
    err = np.where(np.isfinite(lam), err, 0.0)
    order = np.argsort(-lam, axis=1, kind="stable")
    return LyapunovEstimate(np.take_along_axis(lam, order, 1), np.take_along_axis(err, order, 1), blocks)


def lyapunov_spectrum(mf: MeanField, state: State, beta: np.ndarray, g: np.ndarray, eps: np.ndarray,
                      *, n_steps: int, k: int = 2, transient: int = 0, seed: int = 0,
                      kernel: str = "auto") -> np.ndarray:
    """Leading k exponents [B, k] for every value in the batch (see :func:`lyapunov_estimate`)."""
    return lyapunov_estimate(mf, state, beta, g, eps, n_steps=n_steps, k=k, transient=transient, blocks=1,
                             seed=seed, kernel=kernel).exponents
