"""Simulation API: run a batch of parameter values through the fast kernels, trajectories, summaries.

Owns :func:`advance` (the one entry point to the numba simulation kernel, returning the per-value
observables of a sweep), :func:`make_state` (x_0, a checkpoint file or a State), :func:`trajectory`
(full time series of one or a few values), the trajectory file format (:func:`save_trajectory`,
:func:`load_trajectory`, :func:`trajectory_summary`; the CLI writes through them) and
:func:`summary_table` (tidy per-value rows).

Trajectory file (``.npz``, compressed), B runs of n recorded steps, M features:
``t`` [n] time steps, ``m`` [B, n, 4, M] overlaps of W^o, W^v, W^q, W^k (eps-mixed, the order in
``matrices``), ``mo_se`` [B, n, M] the semantic output overlap (the plotted observable), ``A`` [B, n, M]
the attention output, ``beta_o``/``gamma``/``eps`` [B] the parameters of each run, ``matrices`` ["o",
"v", "q", "k"].
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from attnscope.errors import FormatError, InputError, check_type
from attnscope.interrupts import native_call

from .meanfield import MeanField, State, compile_config, initial_state, load_state, params_arrays
from .model import DynamicsConfig
from .regimes import DISTINCT_BINS, count_distinct, distinct_regime


@dataclass
class SweepObservables:
    """Per-value observables over the saved steps (B values, M features)."""

    mean: np.ndarray  # [B, M]
    std: np.ndarray  # [B, M]
    min: np.ndarray  # [B, M]
    max: np.ndarray  # [B, M]
    n_distinct: np.ndarray  # [B] occupied bins of mo_se[feature] (5001 bins on [-y_max, y_max])
    section: list[np.ndarray]  # B arrays [n_b, M]: Poincare-section points
    tail: np.ndarray  # [B, n_tail, M] the last saved values, oldest first
    record: dict[str, np.ndarray] | None = None  # m [B,n,4,M], mo_se [B,n,M], A [B,n,M]


def make_state(mf: MeanField, init: State | str | Path | None, B: int) -> State:
    """A batch of B states: from x_0 (None), a checkpoint npz path, or a given State (copied)."""
    if init is None:
        return initial_state(mf, B)
    if isinstance(init, (str, Path)):
        init = load_state(init, mf)
    if init.mv.shape[1:] != (mf.C, mf.M):
        raise InputError(f"initial state has window {list(init.mv.shape[1:])}, expected [C={mf.C}, M={mf.M}]")
    return init.broadcast(B)


def advance(mf: MeanField, state: State, beta: np.ndarray, g: np.ndarray, eps: np.ndarray,
            n_steps: int, *, transient: int = 0, record: bool = False, feature: int = 0,
            section_feature: int | None = None, section_tol: float = 1e-3, y_max: float | None = None,
            bins: int = DISTINCT_BINS, max_section: int = 2000, n_tail: int = 400,
            kernel: str = "auto") -> SweepObservables:
    """Run every value ``n_steps`` steps (state in place); observables over steps >= ``transient``.

    kernel ``auto`` uses the batch-innermost kernel for batches of 8+ values without recording,
    ``outer`` forces the value-outermost one (both compute the same map).
    """
    from .kernels import run_batch

    B, M = state.A.shape
    if section_feature is None:
        section_feature = min(1, M - 1)
    if n_steps < 1:
        raise InputError(f"steps must be >= 1, got {n_steps}")
    if not 0 <= transient < n_steps:
        raise InputError(f"transient must be in 0..steps-1 (steps = {n_steps}), got {transient}")
    for name, f in (("feature", feature), ("section feature", section_feature)):
        if not 0 <= f < M:
            raise InputError(f"{name} must be in 0..{M - 1}, got {f}")
    n_rec = n_steps if record else 0
    rec_m = np.zeros((B, n_rec, 4, M))
    rec_mo = np.zeros((B, n_rec, M))
    rec_A = np.zeros((B, n_rec, M))
    stats = np.zeros((B, 4, M))
    series = np.zeros((B, n_steps - transient if bins else 0))
    sec_pts = np.zeros((B, max_section, M))
    sec_n = np.zeros(B, dtype=np.int64)
    n_saved = n_steps - transient
    n_tail = min(n_tail, n_saved)
    tail = np.zeros((B, n_tail, M))
    if record or B < 8 or kernel == "outer":
        with native_call():  # hours of numba: SIGTERM / Ctrl-C must still stop it
            run_batch(mf.U, mf.Cf, mf.pos, beta, g, eps, state.mv, state.mk, state.A, state.t, n_steps,
                      transient, rec_m, rec_mo, rec_A, feature, section_feature, section_tol,
                      stats, series, sec_pts, sec_n, tail)
    else:  # batch-innermost layout: SIMD across values, one contiguous part per thread
        import numba

        from .kernels import run_batch_inner

        tr = lambda x, axes: np.ascontiguousarray(x.transpose(axes))  # noqa: E731
        mvT, mkT, AT = tr(state.mv, (1, 2, 0)), tr(state.mk, (1, 2, 0)), tr(state.A, (1, 0))
        statsT = np.zeros((4, M, B))
        seriesT = np.zeros((series.shape[1], B))
        tailT = np.zeros((n_tail, M, B))
        with native_call():  # hours of numba: SIGTERM / Ctrl-C must still stop it
            run_batch_inner(mf.U, mf.Cf, mf.pos, beta, g, eps, mvT, mkT, AT, state.t, n_steps, transient,
                            max(1, min(B // 4, numba.get_num_threads())), feature, section_feature,
                            section_tol, statsT, seriesT, sec_pts, sec_n, tailT)
        state.mv[...] = mvT.transpose(2, 0, 1)
        state.mk[...] = mkT.transpose(2, 0, 1)
        state.A[...] = AT.T
        stats = statsT.transpose(2, 0, 1)
        series = seriesT.T
        tail = tailT.transpose(2, 0, 1)
    state.t += n_steps
    mean = stats[:, 0] / n_saved
    var = np.maximum(stats[:, 1] / n_saved - mean**2, 0.0)
    if n_tail and n_saved > n_tail:
        tail = np.roll(tail, -(n_saved % n_tail), axis=1)
    return SweepObservables(
        mean=mean, std=np.sqrt(var), min=stats[:, 2], max=stats[:, 3],
        n_distinct=count_distinct(series, y_max, bins) if bins else np.zeros(B, dtype=np.int64),
        section=[sec_pts[b, : sec_n[b]].copy() for b in range(B)], tail=tail,
        record={"m": rec_m, "mo_se": rec_mo, "A": rec_A} if record else None,
    )


def summary_table(obs: SweepObservables, params: dict[str, np.ndarray]) -> "pd.DataFrame":  # noqa: F821
    """Tidy per-value rows: parameters, per-feature mean/std/min/max, distinct count and its regime."""
    import pandas as pd

    B, M = obs.mean.shape
    cols: dict[str, object] = {k: np.asarray(v) for k, v in params.items()}
    for f in range(M):
        for stat in ("mean", "std", "min", "max"):
            cols[f"mo_se{f}_{stat}"] = getattr(obs, stat)[:, f]
    cols["n_distinct"] = obs.n_distinct
    cols["regime_distinct"] = [distinct_regime(int(n)) for n in obs.n_distinct]
    cols["n_section"] = [len(s) for s in obs.section]
    return pd.DataFrame(cols)


def trajectory(cfg: DynamicsConfig, *, beta_o=None, gamma=None, eps=None, steps: int = 2000,
               init: State | str | Path | None = None, transient: int = 0) -> dict[str, np.ndarray]:
    """Full time series of one (or a few) parameter values from x_0 or a checkpoint.

    ``transient`` steps run first and are not recorded. Returns t [n], m [B, n, 4, M] (overlaps o, v,
    q, k), mo_se [B, n, M], A [B, n, M], and the parameter arrays; the final state under ``state``.
    """
    for name, value in (("steps", steps), ("transient", transient)):
        check_type(value, (int, np.integer), name, "a whole number of steps")
    mf = compile_config(cfg)
    beta, g, ep = params_arrays(cfg, beta_o, gamma, eps)
    state = make_state(mf, init, beta.size)
    if transient < 0:
        raise InputError(f"transient must be >= 0, got {transient}", params="transient")
    if transient:
        advance(mf, state, beta, g, ep, transient, transient=transient - 1, n_tail=0, bins=0)
    t0 = state.t
    obs = advance(mf, state, beta, g, ep, steps, record=True, feature=0)
    out = dict(obs.record)
    out.update(t=np.arange(t0, t0 + steps), beta_o=beta, gamma=g * np.sqrt(cfg.M), eps=ep, state=state)
    return out


TRAJECTORY_KEYS = ("t", "m", "mo_se", "A", "beta_o", "gamma", "eps", "matrices")
MATRIX_ORDER = ("o", "v", "q", "k")


def save_trajectory(path: str | Path, traj: dict[str, np.ndarray]) -> Path:
    """Write the arrays of :func:`trajectory` as one compressed ``.npz`` (atomic; layout in the module doc)."""
    from attnscope.tables import atomic_write_bytes

    return atomic_write_bytes(path, trajectory_bytes(traj))


def trajectory_bytes(traj: dict[str, np.ndarray]) -> bytes:
    """The bytes :func:`save_trajectory` writes."""
    import io

    buf = io.BytesIO()
    arrays = {k: np.asarray(traj[k]) for k in TRAJECTORY_KEYS if k != "matrices"}
    np.savez_compressed(buf, **arrays, matrices=np.array(MATRIX_ORDER))
    return buf.getvalue()


def load_trajectory(path: str | Path) -> dict[str, np.ndarray]:
    """Read a trajectory file written by :func:`save_trajectory`; a wrong file is one FormatError line."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"trajectory file {path} does not exist")
    try:
        with np.load(path, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except (OSError, ValueError) as exc:
        raise FormatError(f"{path} is not a trajectory .npz file ({exc})") from exc
    missing = [k for k in TRAJECTORY_KEYS if k not in data]
    if missing:
        raise FormatError(f"{path} lacks key(s) {', '.join(missing)} of a trajectory file")
    B, n = data["mo_se"].shape[:2] if data["mo_se"].ndim == 3 else (-1, -1)
    M = data["mo_se"].shape[-1]
    shapes = {"t": (n,), "m": (B, n, 4, M), "A": (B, n, M), "beta_o": (B,), "gamma": (B,), "eps": (B,)}
    bad = [k for k, shp in shapes.items() if data[k].shape != shp]
    if B < 0 or bad:
        raise FormatError(f"{path}: trajectory arrays have inconsistent shapes ({', '.join(bad) or 'mo_se'})")
    return data


def trajectory_summary(traj: dict[str, np.ndarray]) -> list[dict[str, object]]:
    """Per run: beta_o, gamma, eps and the min / max of each feature of m^o_se over the recorded steps."""
    return [{"beta_o": float(b), "gamma": float(traj["gamma"][i]), "eps": float(traj["eps"][i]),
             "min": traj["mo_se"][i].min(axis=0).tolist(), "max": traj["mo_se"][i].max(axis=0).tolist()}
            for i, b in enumerate(traj["beta_o"])]
