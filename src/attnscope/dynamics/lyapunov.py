"""Lyapunov spectra: Benettin/QR on the exact one-step Jacobian.

Owns the generic reference :func:`benettin` (any map given as step + Jacobian, used to validate on
maps with known exponents), the torch-autograd Jacobian of the mean-field step (an independent check
of the analytic tangent map in :mod:`attnscope.dynamics.kernels`), and :func:`lyapunov_spectrum`, the
fast path vectorised over parameter values. Exponents are per step, descending. The state of one
value is (m^v window, m^k window, A), D = 2CM + M; at most C*M exponents are finite (the window is a
function of the last C values of A).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from attnscope.errors import InputError

from .meanfield import MeanField, State


def benettin(step_fn: Callable[[np.ndarray, int], np.ndarray],
             jac_fn: Callable[[np.ndarray, int], np.ndarray],
             x0: np.ndarray, n_steps: int, k: int, *, transient: int = 0, seed: int = 0) -> np.ndarray:
    """Leading ``k`` exponents of x_{t+1} = step_fn(x_t, t): dx <- J dx; QR; sum log|diag R| / steps."""
    x = np.array(x0, dtype=np.float64)
    D = x.size
    if not 1 <= k <= D:
        raise InputError(f"number of exponents must be in 1..{D}, got {k}")
    Qm, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((D, k)))
    acc = np.zeros(k)
    for i in range(transient + n_steps):
        J = jac_fn(x, i)
        x = step_fn(x, i)
        Qm, R = np.linalg.qr(J @ Qm)
        if i >= transient:
            acc += np.log(np.abs(np.diag(R)))
    return np.sort(acc / n_steps)[::-1]


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


def lyapunov_spectrum(mf: MeanField, state: State, beta: np.ndarray, g: np.ndarray, eps: np.ndarray,
                      *, n_steps: int, k: int = 2, transient: int = 0, seed: int = 0,
                      kernel: str = "auto") -> np.ndarray:
    """Leading k exponents [B, k] for every value in the batch (numba, parallel); state advances in place.

    ``n_steps`` counts the averaging steps; ``transient`` steps run first (state and tangents) unaveraged.
    kernel ``auto``: batch-innermost (SIMD) kernel for 8+ values, ``outer`` forces the per-value one.
    """
    from .kernels import lyapunov_batch, lyapunov_batch_inner

    D = 2 * mf.C * mf.M + mf.M
    if not 1 <= k <= mf.C * mf.M:
        raise InputError(f"number of exponents must be in 1..{mf.C * mf.M} (C*M) for this model, got {k}")
    if n_steps < 1 or transient < 0:
        raise InputError("Lyapunov spectra need steps >= 1 and transient >= 0")
    B = state.A.shape[0]
    out = np.zeros((B, k))
    Q0 = initial_tangents(D, k, seed)
    if B < 8 or kernel == "outer":
        lyapunov_batch(mf.U, mf.Cf, mf.pos, beta, g, eps, state.mv, state.mk, state.A, state.t,
                       transient + n_steps, transient, Q0, out)
    else:
        import numba

        mvT = np.ascontiguousarray(state.mv.transpose(1, 2, 0))
        mkT = np.ascontiguousarray(state.mk.transpose(1, 2, 0))
        AT = np.ascontiguousarray(state.A.T)
        lyapunov_batch_inner(mf.U, mf.Cf, mf.pos, beta, g, eps, mvT, mkT, AT, state.t, transient + n_steps,
                             transient, Q0, max(1, min(B // 4, numba.get_num_threads())), out)
        state.mv[...] = mvT.transpose(2, 0, 1)
        state.mk[...] = mkT.transpose(2, 0, 1)
        state.A[...] = AT.T
    state.t += transient + n_steps
    return out
