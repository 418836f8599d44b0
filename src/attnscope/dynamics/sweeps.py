"""Parameter sweeps: bifurcation diagrams (paper protocol, continuation, from x_0), Lyapunov tables
and 2-D phase diagrams, chunked through :mod:`attnscope.runs` so large sweeps are resumable and can
run on a process pool or a Slurm array.

Every chunk is a batch of parameter values advanced together by the numba kernels. A chunk's result
is one tidy DataFrame with a ``kind`` column: ``value`` rows (one per parameter value: summary
statistics, distinct-value regime, Lyapunov exponents and regime) and ``tail`` / ``section`` rows (the
points of the bifurcation figure: the last saved values and the Poincare-section samples).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from attnscope.errors import InputError

from .meanfield import State, compile_config, params_arrays
from .model import SWEEP_PARAMS, DynamicsConfig, from_dict
from .regimes import classify, lyapunov_regime

MODES = ("protocol", "continuation", "x0")
LYAP_BLOCKS = 10  # block averages behind each exponent's error
ALIGN_FRACTION = 10  # a bifurcation's --lyap-steps: the first 1/10 aligns the tangents, the rest is averaged


def default_k(cfg: DynamicsConfig, k: int | None) -> int:
    """Number of exponents: as asked, or min(2, C*M) (the finite ones) when not given."""
    return min(2, cfg.C * cfg.M) if k is None else int(k)


def sweep_values(start: float, stop: float, num: int) -> np.ndarray:
    """``num`` evenly spaced values in [start, stop]; a sweep with no points is an error."""
    if num is None or int(num) < 1:
        raise InputError(f"a sweep needs at least one point (num >= 1), got {num}", params="num")
    for name, v in (("start", start), ("stop", stop)):
        if not np.isfinite(float(v)):
            raise InputError(f"sweep {name} must be finite, got {v}")
    if int(num) > 1 and not float(start) < float(stop):
        raise InputError(f"a sweep of {num} points needs start < stop, got start {start} and stop {stop}")
    return np.linspace(float(start), float(stop), int(num))


def _check_run(workers: int, chunk: int) -> None:
    """Options of a chunked sweep that must be positive."""
    if int(workers) < 1:
        raise InputError(f"workers must be >= 1, got {workers}", params="workers")
    if int(chunk) < 1:
        raise InputError(f"chunk must be >= 1, got {chunk}", params="chunk")


def _check_param(param: str) -> str:
    if param not in SWEEP_PARAMS:
        raise InputError(f"cannot sweep {param!r}; choose one of {', '.join(SWEEP_PARAMS)}")
    return param


def _state_dict(state: State) -> dict[str, Any]:
    return {"mv": state.mv, "mk": state.mk, "A": state.A, "t": int(state.t)}


def _state_from(d: dict[str, Any] | None) -> State | None:
    if d is None:
        return None
    return State(np.array(d["mv"]), np.array(d["mk"]), np.array(d["A"]), int(d["t"]))


def run_chunk(payload: dict[str, Any]) -> "pd.DataFrame":  # noqa: F821
    """Top-level task: simulate a batch of values, return value + point rows (see module docstring)."""
    return chunk_with_state(payload)[0]


def chunk_with_state(payload: dict[str, Any]) -> tuple["pd.DataFrame", State]:  # noqa: F821
    """:func:`run_chunk` plus the final state after the run (before any Lyapunov steps).

    payload: config (dict), params {name: [B] values}, init (state dict, one state or None = x_0),
    steps, transient, lyap_steps, lyap_k, feature, section_feature, n_tail, max_section, direction.
    """
    import pandas as pd

    from .lyapunov import lyapunov_estimate
    from .simulate import advance, make_state, summary_table

    cfg = from_dict(payload["config"])
    mf = compile_config(cfg)
    params = {k: np.asarray(v, dtype=np.float64) for k, v in payload["params"].items()}
    beta, g, eps = params_arrays(cfg, params.get("beta_o"), params.get("gamma"), params.get("eps"))
    B = beta.size
    state = make_state(mf, _state_from(payload.get("init")), B)
    steps, transient = int(payload["steps"]), int(payload["transient"])
    rows = []
    if steps > 0:
        obs = advance(mf, state, beta, g, eps, steps, transient=transient,
                      feature=int(payload.get("feature", 0)),
                      section_feature=int(payload.get("section_feature", min(1, cfg.M - 1))),
                      n_tail=int(payload.get("n_tail", 100)), max_section=int(payload.get("max_section", 300)))
        table = summary_table(obs, params)
    else:
        obs = None
        table = pd.DataFrame({k: v for k, v in params.items()})
    final = state.copy()
    k = int(payload.get("lyap_k", 2))
    n_lyap = int(payload.get("lyap_steps", 0))
    if n_lyap > 0 and k > 0:
        if payload.get("lyap_transient") is None:  # a bifurcation: the tangents align in the first part
            align, n_avg = n_lyap // ALIGN_FRACTION, n_lyap - n_lyap // ALIGN_FRACTION
        else:  # a phase sweep: its own transient, then n_lyap averaged steps
            align, n_avg = int(payload["lyap_transient"]), n_lyap
        est = lyapunov_estimate(mf, state, beta, g, eps, n_steps=n_avg, k=k, transient=align, blocks=LYAP_BLOCKS)
        for j in range(k):
            table[f"lambda_{j + 1}"] = est.exponents[:, j]
        for j in range(k):
            table[f"lambda_{j + 1}_err"] = est.error[:, j]
        table["regime_lyapunov"] = [lyapunov_regime(r, e, n_avg) for r, e in zip(est.exponents, est.error)]
        if obs is not None:
            table["regime"] = [classify(r, e, n_avg, nd, ns) for r, e, nd, ns in
                               zip(est.exponents, est.error, table["n_distinct"], table["n_section"])]
        else:
            table["regime"] = table["regime_lyapunov"]
    table.insert(0, "kind", "value")
    dirs = np.asarray(payload.get("directions") or [payload.get("direction", "")] * B, dtype=object)
    table["direction"] = dirs
    rows.append(table)
    if obs is not None:
        M = cfg.M
        for kind, pts in (("tail", [obs.tail[b] for b in range(B)]), ("section", obs.section)):
            n = np.array([len(p) for p in pts])
            if n.sum() == 0:
                continue
            cat = np.concatenate([p for p in pts if len(p)], axis=0)
            df = pd.DataFrame({name: np.repeat(v, n) for name, v in params.items()})
            df.insert(0, "kind", kind)
            for f in range(M):
                df[f"mo_se{f}"] = cat[:, f]
            df["direction"] = np.repeat(dirs, n)
            rows.append(df)
    return pd.concat(rows, ignore_index=True), final


@dataclass
class SweepResult:
    """Per-value table, figure points and (protocol mode) the shared checkpoint state."""

    table: "pd.DataFrame"  # noqa: F821
    points: "pd.DataFrame"  # noqa: F821
    checkpoint: State | None = None


def _split(df: "pd.DataFrame") -> tuple["pd.DataFrame", "pd.DataFrame"]:  # noqa: F821
    values = df[df["kind"] == "value"].drop(columns=["kind"]).dropna(axis=1, how="all").reset_index(drop=True)
    points = df[df["kind"] != "value"].dropna(axis=1, how="all").reset_index(drop=True)
    keep = [c for c in points.columns if not c.startswith("mo_se") or "_" not in c[5:]]
    points = points[[c for c in keep if c not in ("n_distinct", "regime_distinct", "n_section")
                     and not c.startswith("lambda_") and c != "regime"]]
    return values, points


def protocol_checkpoint(cfg: DynamicsConfig, param: str, values: np.ndarray, steps: int,
                        init: State | str | Path | None = None) -> State:
    """The paper's checkpoint: simulate the largest value from x_0 (or ``init``) for ``steps`` steps;
    the final window, re-timed so that the sweep continues at t = C (same positional phase)."""
    from .simulate import advance, make_state

    mf = compile_config(cfg)
    top = float(np.max(values))
    beta, g, eps = params_arrays(cfg, **{param: [top]})
    state = make_state(mf, init, 1)
    n = steps - 1 if init is None and steps > 1 else steps  # from x_0: time points t = 0..steps-1
    advance(mf, state, beta, g, eps, n, transient=n - 1, n_tail=0)
    state.t = mf.C + (state.t % mf.C)
    return state


def _key_prefix(name: str, payload_common: dict[str, Any]) -> str:
    blob = json.dumps(payload_common, sort_keys=True, default=lambda o: np.asarray(o).tolist())
    return f"{name}-{hashlib.sha1(blob.encode()).hexdigest()[:10]}"


def run_chunks(name: str, payloads: list[dict[str, Any]], *, store: str | Path | None,
               executor: str = "inline", workers: int = 2, slurm: dict | None = None,
               progress: bool = False) -> "pd.DataFrame":  # noqa: F821
    """Run chunk payloads directly (store None) or through attnscope.runs into a resumable store."""
    import pandas as pd

    if store is None:
        from attnscope.progress import track

        it = track(payloads, name, enabled=progress, unit="chunks")
        return pd.concat([run_chunk(p) for p in it], ignore_index=True)
    from attnscope.runs import ResultsStore, Task, run_tasks

    tasks = []
    for i, p in enumerate(payloads):
        tasks.append(Task(key=f"{_key_prefix(name, p)}-{i:05d}", payload=p))
    st = ResultsStore(store)
    summary = run_tasks(run_chunk, tasks, st, executor=executor, workers=workers, slurm=slurm,
                        progress=progress, desc=name)
    if summary.failed:
        first = next(iter(summary.failed.items()))
        raise InputError(f"{len(summary.failed)} chunk(s) of the {name} sweep failed, e.g. {first[0]}: {first[1]}")
    return pd.concat([st.read(t.key) for t in tasks], ignore_index=True)


def bifurcation(cfg: DynamicsConfig, values: Sequence[float], *, param: str = "beta_o",
                steps: int = 120_000, transient: int = 100_000, mode: str = "protocol",
                init: State | str | Path | None = None, checkpoint_steps: int | None = None,
                lyap_steps: int = 5000, lyap_k: int | None = None, feature: int = 0, section_feature: int | None = None,
                n_tail: int = 100, max_section: int = 300, chunk: int = 512, store: str | Path | None = None,
                executor: str = "inline", workers: int = 2, slurm: dict | None = None,
                progress: bool = False) -> SweepResult:
    """Sweep one parameter; per value: summary, points, distinct-value and Lyapunov regimes.

    mode ``protocol``: one checkpoint from the largest value (run ``checkpoint_steps`` from x_0),
    every value starts from it at t = C. ``continuation``: each value starts from its neighbour's final
    state, swept upwards then downwards (``direction`` column). ``x0``: every value from x_0 / ``init``.
    """
    param = _check_param(param)
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        raise InputError("a sweep needs at least one point")
    if not np.all(np.isfinite(values)):
        raise InputError(f"{param} values must be finite")
    if mode not in MODES:
        raise InputError(f"unknown bifurcation mode {mode!r}; choose one of {', '.join(MODES)}")
    if steps < 1 or not 0 <= transient < steps:
        raise InputError(f"need steps >= 1 and 0 <= transient < steps (got steps={steps}, transient={transient})",
                         params=("steps", "transient"))
    if lyap_steps < 0:
        raise InputError(f"lyap_steps must be >= 0 (0 skips the Lyapunov estimate), got {lyap_steps}", params="lyap_steps")
    if checkpoint_steps is not None and checkpoint_steps < 1:
        raise InputError(f"checkpoint_steps must be >= 1, got {checkpoint_steps}", params="checkpoint_steps")
    _check_run(workers, chunk)
    mf = compile_config(cfg)
    if not 0 <= feature < cfg.M:
        raise InputError(f"feature must be in 0..{cfg.M - 1}, got {feature}", params="feature")
    sf = min(1, cfg.M - 1) if section_feature is None else section_feature
    if not 0 <= sf < cfg.M:
        raise InputError(f"section_feature must be in 0..{cfg.M - 1}, got {sf}", params="section_feature")
    lyap_k = default_k(cfg, lyap_k)
    if not 1 <= lyap_k <= cfg.C * cfg.M:
        raise InputError(f"number of exponents must be in 1..{cfg.C * cfg.M} (C*M) for this model, got {lyap_k}")
    common = {"config": cfg.to_dict(), "steps": steps, "transient": transient, "lyap_steps": lyap_steps,
              "lyap_k": lyap_k, "feature": feature, "section_feature": sf, "n_tail": n_tail,
              "max_section": max_section}
    checkpoint = None
    if isinstance(init, (str, Path)):
        from .meanfield import load_state

        init = load_state(init, mf)
    if mode == "continuation":
        import pandas as pd

        # the upward and downward sweeps are independent: advance them together as a batch of two
        n = values.size
        state = None if init is None else init.broadcast(2)
        frames = []
        from attnscope.progress import track

        for i in track(range(n), "continuation up + down", enabled=progress, unit="values"):
            p = dict(common, params={param: [values[i], values[n - 1 - i]]}, directions=["up", "down"],
                     init=None if state is None else _state_dict(state))
            df, state = chunk_with_state(p)
            frames.append(df)
        df = pd.concat(frames, ignore_index=True)
        df = pd.concat([df[df["direction"] == "up"], df[df["direction"] == "down"]], ignore_index=True)
        values_df, points = _split(df)
        return SweepResult(values_df, points, None)
    if mode == "protocol":
        checkpoint = protocol_checkpoint(cfg, param, values, steps if checkpoint_steps is None else checkpoint_steps,
                                         init)
        start = _state_dict(checkpoint)
    else:
        start = None if init is None else _state_dict(init)
    payloads = [dict(common, params={param: values[i:i + chunk].tolist()}, init=start, direction=mode)
                for i in range(0, values.size, chunk)]
    df = run_chunks(f"bifurcation-{param}", payloads, store=store, executor=executor, workers=workers,
                    slurm=slurm, progress=progress)
    values_df, points = _split(df)
    return SweepResult(values_df, points, checkpoint)


def lyapunov_table(cfg: DynamicsConfig, values: Sequence[float], *, param: str = "beta_o",
                   init: State | str | Path | None = None, transient: int = 10_000, steps: int = 10_000,
                   k: int | None = None) -> "pd.DataFrame":  # noqa: F821
    """Leading k exponents (per step, descending) and the regime for each value, vectorised."""
    import pandas as pd

    from .lyapunov import lyapunov_estimate
    from .simulate import make_state

    param = _check_param(param)
    values = np.asarray(values, dtype=np.float64)
    mf = compile_config(cfg)
    beta, g, eps = params_arrays(cfg, **{param: values})
    state = make_state(mf, init, beta.size)
    k = default_k(cfg, k)
    if transient < 0 or steps < 1:
        raise InputError(f"need steps >= 1 and transient >= 0 (got steps={steps}, transient={transient})",
                         params=("steps", "transient"))
    est = lyapunov_estimate(mf, state, beta, g, eps, n_steps=steps, k=k, transient=transient, blocks=LYAP_BLOCKS)
    return pd.DataFrame({param: values, "lyapunov": [list(map(float, r)) for r in est.exponents],
                         "error": [list(map(float, r)) for r in est.error],
                         "regime": [lyapunov_regime(r, e, steps) for r, e in zip(est.exponents, est.error)]})


def phase(cfg: DynamicsConfig, x: tuple[str, Sequence[float]], y: tuple[str, Sequence[float]], *,
          transient: int = 20_000, steps: int = 5000, k: int | None = None, init: State | str | Path | None = None,
          chunk: int = 256, store: str | Path | None = None, executor: str = "inline", workers: int = 2,
          slurm: dict | None = None, progress: bool = False) -> "pd.DataFrame":  # noqa: F821
    """2-D sweep of two parameters: lambda_1..k and the Lyapunov regime on the grid (x fastest)."""
    px, vx = _check_param(x[0]), np.asarray(x[1], dtype=np.float64)
    py, vy = _check_param(y[0]), np.asarray(y[1], dtype=np.float64)
    if px == py:
        raise InputError("a phase diagram needs two different parameters")
    if vx.size == 0 or vy.size == 0:
        raise InputError("a phase sweep needs at least one point on each axis")
    if not (np.all(np.isfinite(vx)) and np.all(np.isfinite(vy))):
        raise InputError("phase sweep values must be finite")
    if steps < 1 or transient < 0:
        raise InputError(f"a phase sweep needs steps >= 1 and transient >= 0 (got steps={steps}, transient={transient})",
                         params=("steps", "transient"))
    _check_run(workers, chunk)
    mf = compile_config(cfg)
    k = default_k(cfg, k)
    if not 1 <= k <= cfg.C * cfg.M:
        raise InputError(f"number of exponents must be in 1..{cfg.C * cfg.M} (C*M) for this model, got {k}")
    if isinstance(init, (str, Path)):
        from .meanfield import load_state

        init = load_state(init, mf)
    gx, gy = np.meshgrid(vx, vy)  # [ny, nx]
    gx, gy = gx.ravel(), gy.ravel()
    common = {"config": cfg.to_dict(), "steps": 0, "transient": 0, "lyap_steps": steps,
              "lyap_transient": transient, "lyap_k": k, "init": None if init is None else _state_dict(init)}
    payloads = [dict(common, params={px: gx[i:i + chunk].tolist(), py: gy[i:i + chunk].tolist()},
                     direction="phase") for i in range(0, gx.size, chunk)]
    df = run_chunks(f"phase-{px}-{py}", payloads, store=store, executor=executor, workers=workers,
                    slurm=slurm, progress=progress)
    return df.drop(columns=["kind", "direction"]).reset_index(drop=True)
