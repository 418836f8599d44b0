"""The finite-N stochastic network behind the mean-field theory, and its error vs N.

Owns :func:`simulate_finite` (each semantic bit sampled independently with P(x_i = +1) =
(1 + tanh(beta_o sum_a W^o_{a,i} A_a)) / 2, every mean-field column repeated R times; the bits of one
column group are summed exactly with a binomial draw, so N up to 10^6+ costs nothing) and
:func:`finite_size_table` (error of the overlaps against the mean field over a short horizon, for a
list of repetition factors, several seeds).

Legend: b seed (batch), k semantic column group, a matrix (o v q k), m features.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from attnscope.errors import InputError

from .meanfield import O, attend, compile_config, initial_state, params_arrays, simulate_reference
from .model import MATRICES, DynamicsConfig


def simulate_finite(cfg: DynamicsConfig, repeats: int, steps: int, *, seeds: Sequence[int] = (0,),
                    beta_o: float | None = None) -> np.ndarray:
    """m^o_se of the sampled network [n_seeds, steps, M] from x_0 (deterministic t = 0 token)."""
    if repeats < 1:
        raise InputError(f"repeats must be >= 1, got {repeats}", params="repeats")
    mf = compile_config(cfg)
    B = len(seeds)
    beta, g, eps = params_arrays(cfg, beta_o=[cfg.beta_o if beta_o is None else beta_o] * B)
    W = np.stack([cfg.columns[a] for a in MATRICES])  # [4, M, K]
    n = cfg.counts * repeats  # [K] bits per group
    n_se = n.sum()
    rngs = [np.random.default_rng(s) for s in seeds]
    state = initial_state(mf, B)  # x_0 repeated: the overlaps at t = 0 are those of the mean field
    out = np.empty((B, steps, cfg.M))
    for i in range(steps):
        phi = state.t % mf.C
        prob = 0.5 * (1.0 + np.tanh(beta[:, None] * (state.A @ cfg.columns["o"])))  # [B, K]
        plus = np.stack([r.binomial(n, pk) for r, pk in zip(rngs, prob)])  # [B, K]
        S = 2.0 * plus - n  # sum of the group's bits
        avg = np.einsum("amk,bk->bam", W, S) / n_se  # [B, 4, M]
        m = (1.0 - eps)[:, None, None] * avg + eps[:, None, None] * mf.pos[:, phi][None]
        attend(state, m, g)
        out[:, i] = avg[:, O]
    return out


def finite_size_table(cfg: DynamicsConfig, repeats: Sequence[int] = (1, 10, 100, 1000, 10000), *,
                      steps: int = 20, seeds: int = 8, beta_o: float | None = None) -> "pd.DataFrame":  # noqa: F821
    """Error of m^o_se (finite N vs mean field) over ``steps`` steps: RMS and max over steps, seeds, features."""
    import pandas as pd

    if steps < 1 or seeds < 1 or len(repeats) == 0:
        raise InputError("finite-size check needs steps >= 1, seeds >= 1 and at least one N")
    mf = compile_config(cfg)
    b = cfg.beta_o if beta_o is None else beta_o
    beta, g, eps = params_arrays(cfg, beta_o=[b])
    ref = simulate_reference(mf, initial_state(mf, 1), beta, g, eps, steps)["mo_se"]  # [1, steps, M]
    rows = []
    for R in repeats:
        fin = simulate_finite(cfg, int(R), steps, seeds=range(seeds), beta_o=b)
        err = fin - ref
        rows.append({"beta_o": b, "repeats": int(R), "N": int(cfg.N_se * R + cfg.P), "N_se": int(cfg.N_se * R),
                     "steps": steps, "seeds": seeds, "rmse": float(np.sqrt(np.mean(err**2))),
                     "max_abs_error": float(np.max(np.abs(err))),
                     "rmse_first_step": float(np.sqrt(np.mean(err[:, 0] ** 2)))})
    return pd.DataFrame(rows)
