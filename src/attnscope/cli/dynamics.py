"""``attnscope dynamics``: mean-field dynamics of 1-bit self-attention (a thin layer over
:mod:`attnscope.dynamics`): trajectory, bifurcation, lyapunov, phase, finite, show."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, List, Optional

import typer
from rich.markup import escape

from attnscope.errors import InputError
from attnscope.tables import make_out_dir

from ._common import (THREADS, check_out_file, check_out_names, echo_json, old_name, slurm_options, stderr_console,
                      use_threads, write_out_table)
from ._tables import print_frame, print_table

app = typer.Typer(help="Mean-field dynamics of a 1-bit self-attention network (trajectories, bifurcations, chaos).",
                  no_args_is_help=True)

# shared options
PRESET = typer.Option(None, "--preset", help="Named preset (default: paper).")
CONFIG = typer.Option(None, "--config", help="YAML or TOML config file.")
WSEED = typer.Option(None, "--weights-seed", help="Random +-1 weights from this seed (M=3, P=2, 3x33 segments).")
SETS = typer.Option(None, "--set", help="Override a scalar, e.g. --set eps=0.05 (repeatable).")
GAMMA = typer.Option(None, "--gamma", help="Attention gain gamma, g = gamma / sqrt(M) (default: the config's).")
EPS = typer.Option(None, "--eps", help="Positional weight eps, 0..1 (default: the config's).")
INIT = typer.Option(None, "--init-state", help="Checkpoint .npz (mv_window, mk_window, mq_window, att_window).")
EXECUTOR = typer.Option("none", "--executor", help="none (in-process), inline, local or slurm (chunks in OUT/store).")


def _regimes(regimes: Any, what: str) -> None:
    """How many values fell in each regime, as a table (the CLI's tables, on stderr)."""
    counts = regimes.value_counts()
    print_table(stderr_console(), f"regimes of the {what}", ["regime", "values"],
                [[escape(str(k)), str(int(v))] for k, v in counts.items()], left=["regime"])


def _config(preset, config, weights_seed, sets, **scalars):
    from attnscope.dynamics import apply_overrides, resolve_config

    cfg = resolve_config(preset, config, weights_seed, scalars)
    return apply_overrides(cfg, list(sets)) if sets else cfg



def _check_feature(cfg, name: str, f: Optional[int]) -> None:
    if f is not None and not 0 <= f < cfg.M:
        raise InputError(f"{name} must be in 0..{cfg.M - 1} for this model (M = {cfg.M}), got {f}")


#: the Slurm options of the sweeps, spelled as in ``geometry --zoo`` and ``train --seeds``; ``--partition`` and
#: ``--time-min`` (their first names) still work
SLURM_PARTITION = typer.Option(None, "--slurm-partition", "--partition", help="Slurm partition (--executor slurm; default: the cluster's).")
SLURM_TIME = typer.Option(None, "--slurm-time", "--time-min", help="Minutes per Slurm job (one chunk; default 60).")
SLURM_MEM = typer.Option(None, "--slurm-mem", help="Memory per Slurm job, GB (default: the partition's).")


def _slurm(executor: str, partition: Optional[str], time_min: Optional[int], mem_gb: Optional[float]) -> dict | None:
    """The sweeps' executor checked (``none`` included) and their Slurm options, before any work."""
    from attnscope.runs import EXECUTORS

    if executor not in ("none", *EXECUTORS):
        raise InputError(f"unknown executor {executor!r}; choose one of none, {', '.join(EXECUTORS)}")
    return slurm_options(executor, partition, time_min, mem_gb)


@app.command()
def show(preset: Optional[str] = PRESET, config: Optional[Path] = CONFIG,
         weights_seed: Optional[int] = WSEED, sets: Optional[List[str]] = SETS) -> None:
    """Print the resolved config (weights as column groups) as YAML."""
    import yaml

    cfg = _config(preset, config, weights_seed, sets)
    typer.echo(yaml.safe_dump(cfg.to_dict(), sort_keys=False, default_flow_style=None))


@app.command()
def trajectory(
    beta_o: Optional[List[float]] = typer.Option(None, "--beta-o", help="Output inverse temperature (repeatable; default: the config's)."),
    steps: int = typer.Option(5000, "--steps", help="Steps recorded, after --transient (at least 2)."),
    transient: int = typer.Option(0, "--transient", help="Steps run first and discarded, before --steps."),
    out: Path = typer.Option(..., "--out", help="Output directory (created if missing)."),
    init_state: Optional[Path] = INIT,
    preset: Optional[str] = PRESET, config: Optional[Path] = CONFIG, weights_seed: Optional[int] = WSEED,
    sets: Optional[List[str]] = SETS, gamma: Optional[float] = GAMMA, eps: Optional[float] = EPS,
    feature: int = typer.Option(0, "--feature", help="Feature shown in the figures (0-based)."),
    last: int = typer.Option(400, "--last", help="Steps shown in the time-series figure."),
    figures: bool = typer.Option(True, "--figures/--no-figures", help="Write the PNG figures (--no-figures: only the .npz and summary.json)."),
    as_json: bool = typer.Option(False, "--json", help="Print a JSON summary on stdout."),
    threads: Optional[int] = THREADS,
) -> None:
    """Simulate from x_0 or --init-state: trajectory.npz, final_state.npz and figures in OUT."""
    use_threads(threads)
    from attnscope import dynamics as dyn
    from attnscope.dynamics.meanfield import state_bytes
    from attnscope.dynamics.simulate import trajectory_bytes
    from attnscope.outputs import write_result_set
    from attnscope.plots import dynamics as plots
    from attnscope.plots.base import figure_bytes
    from attnscope.tables import json_text

    cfg = _config(preset, config, weights_seed, sets, gamma=gamma, eps=eps)
    if steps < 2:
        raise InputError("--steps must be >= 2")
    if last < 1:
        raise InputError(f"--last must be >= 1, got {last}")
    _check_feature(cfg, "--feature", feature)
    check_out_names(out, TRAJECTORY_FILES)  # a file of yours by one of these names: refused before the run
    traj = dyn.trajectory(cfg, beta_o=beta_o or None, steps=steps, init=init_state, transient=transient)
    written: dict[str, Any] = {"trajectory.npz": trajectory_bytes(traj), "final_state.npz": state_bytes(traj["state"])}
    if figures:
        df = plots.trajectory_frame(traj)
        if cfg.M > 1:
            written["phase_plane.png"] = figure_bytes(plots.phase_plane(df, features=(feature, (feature + 1) % cfg.M)))
        written["timeseries.png"] = figure_bytes(plots.timeseries(df, feature=feature, last=last))
        written["power_spectrum.png"] = figure_bytes(plots.power_spectrum(df, feature=feature))
        written["autocorrelation.png"] = figure_bytes(plots.autocorrelation(df, feature=feature))
    summary = dyn.trajectory_summary(traj)
    written["summary.json"] = json_text({"config": cfg.to_dict(), "steps": steps, "transient": transient,
                                         "runs": summary})
    write_result_set(out, written, {"steps": steps, "transient": transient}, kind="dynamics-trajectory")
    files = [n for n in written if n != "summary.json"]
    if as_json:
        echo_json(json.dumps({"out": str(out), "files": files, "runs": summary}))
    else:
        stderr_console().print(f"wrote {', '.join(files)} to {out}")


#: the files `dynamics trajectory` and `dynamics bifurcation` may write into their --out folder
TRAJECTORY_FILES = ("trajectory.npz", "final_state.npz", "timeseries.png", "power_spectrum.png", "autocorrelation.png",
                    "phase_plane.png", "summary.json")
BIFURCATION_FILES = ("bifurcation.csv", "points.parquet", "checkpoint.npz", "bifurcation.png", "lyapunov.png")


@app.command()
def lyapunov(
    beta_o: Optional[List[float]] = typer.Option(None, "--beta-o", help="Values of beta_o (repeatable; default: the config's)."),
    transient: int = typer.Option(20000, "--transient", help="Steps run first and discarded (state and tangents align), before --steps."),
    steps: int = typer.Option(20000, "--steps", help="Steps averaged, after --transient."),
    exponents: Optional[int] = typer.Option(None, "--exponents", help="Number K of leading exponents (default 2)."),
    init_state: Optional[Path] = INIT,
    preset: Optional[str] = PRESET, config: Optional[Path] = CONFIG, weights_seed: Optional[int] = WSEED,
    sets: Optional[List[str]] = SETS, gamma: Optional[float] = GAMMA, eps: Optional[float] = EPS,
    out: Optional[Path] = typer.Option(None, "--out", help="Also write the table (.csv/.parquet/.json)."),
    as_json: bool = typer.Option(False, "--json", help="Print [{beta_o, lyapunov, error, regime}] on stdout (error: the standard error of each exponent)."),
    threads: Optional[int] = THREADS,
) -> None:
    """Leading Lyapunov exponents (per step, descending) and the regime, for each beta_o."""
    use_threads(threads)
    from attnscope import dynamics as dyn
    from attnscope.tables import records_to_json

    cfg = _config(preset, config, weights_seed, sets, gamma=gamma, eps=eps)
    values = list(beta_o) if beta_o else [cfg.beta_o]
    check_out_file(out)  # the table's suffix, a writable place, no file of yours there: before the (long) estimate
    df = dyn.lyapunov_table(cfg, values, init=init_state, transient=transient, steps=steps, k=exponents)
    if out is not None:
        write_out_table(df, out, kind="dynamics-lyapunov")
    if as_json:
        echo_json(records_to_json(df))
        return
    header = ["beta_o", *[f"lambda_{i + 1}" for i in range(len(df["lyapunov"].iloc[0]))], "regime"]
    rows = [[f"{r.beta_o:g}", *[f"{x:+.6f} ± {e:.1e}" for x, e in zip(r.lyapunov, r.error)], r.regime]
            for r in df.itertuples(index=False)]
    con = stderr_console()
    print_table(con, "Lyapunov exponents per step (± standard error)", header, rows, left=["regime"])
    if out is not None:
        con.print(f"wrote {out}", highlight=False)


@app.command()
def bifurcation(
    param: str = typer.Option("beta_o", "--param", help="Parameter swept: beta_o, gamma or eps."),
    start: float = typer.Option(..., "--start", help="First value of --param."),
    stop: float = typer.Option(..., "--stop", help="Last value of --param (included)."),
    num: int = typer.Option(..., "--num", help="Number of values, evenly spaced from --start to --stop."),
    steps: int = typer.Option(120000, "--total-steps", help="Steps run per value, --transient included (the points are the last --total-steps minus --transient)."),
    steps_alias: Optional[int] = typer.Option(None, "--steps", hidden=True, help="Old name of --total-steps."),
    transient: int = typer.Option(100000, "--transient", help="Steps run first and discarded per value (part of --total-steps)."),
    out: Path = typer.Option(..., "--out", help="Output directory (created if missing)."),
    mode: str = typer.Option("protocol", "--mode", help="protocol (paper), continuation (both directions) or x0."),
    checkpoint_steps: Optional[int] = typer.Option(None, "--checkpoint-steps", help="Steps of the protocol checkpoint run (default: --total-steps)."),
    lyap_steps: int = typer.Option(5000, "--lyap-steps", help="Steps of the Lyapunov estimate after the run: the first tenth aligns the tangent vectors, the rest is averaged (0: skip)."),
    exponents: Optional[int] = typer.Option(None, "--exponents", help="Leading exponents (default 2)."),
    feature: int = typer.Option(0, "--feature", help="Plotted feature (0-based)."),
    section_feature: Optional[int] = typer.Option(None, "--section-feature", help="Poincare section |m_f| <= 1e-3 (default 1)."),
    init_state: Optional[Path] = INIT,
    preset: Optional[str] = PRESET, config: Optional[Path] = CONFIG, weights_seed: Optional[int] = WSEED,
    sets: Optional[List[str]] = SETS, gamma: Optional[float] = GAMMA, eps: Optional[float] = EPS,
    beta_o: Optional[float] = typer.Option(None, "--beta-o", help="Fixed beta_o when sweeping another parameter (default: the config's)."),
    executor: str = EXECUTOR, workers: int = typer.Option(2, "--workers", help="Parallel worker processes (--executor local)."),
    chunk: int = typer.Option(256, "--chunk", help="Values per chunk (one task each)."),
    slurm_partition: Optional[str] = SLURM_PARTITION, slurm_time: Optional[int] = SLURM_TIME,
    slurm_mem: Optional[float] = SLURM_MEM,
    as_json: bool = typer.Option(False, "--json", help="Print the per-value table as JSON on stdout."),
    threads: Optional[int] = THREADS,
) -> None:
    """Sweep one parameter: bifurcation.csv, points.parquet, bifurcation.png, lyapunov.png in OUT."""
    use_threads(threads)
    from attnscope import dynamics as dyn
    from attnscope.dynamics.meanfield import state_bytes
    from attnscope.outputs import write_result_set
    from attnscope.plots import dynamics as plots
    from attnscope.plots.base import figure_bytes
    from attnscope.tables import records_to_json, table_bytes

    steps = old_name(steps_alias, steps, 120000, "--steps", "--total-steps")
    cfg = _config(preset, config, weights_seed, sets, gamma=gamma, eps=eps, beta_o=beta_o)
    values = dyn.sweep_values(start, stop, num)
    _check_feature(cfg, "--feature", feature)
    _check_feature(cfg, "--section-feature", section_feature)
    slurm = _slurm(executor, slurm_partition, slurm_time, slurm_mem)
    check_out_names(out, BIFURCATION_FILES)  # before the sweep
    make_out_dir(out)
    res = dyn.bifurcation(
        cfg, values, param=param, steps=steps, transient=transient, mode=mode, init=init_state,
        checkpoint_steps=checkpoint_steps, lyap_steps=lyap_steps, lyap_k=exponents, feature=feature,
        section_feature=section_feature, chunk=chunk, store=None if executor == "none" else out / "store",
        executor="inline" if executor == "none" else executor, workers=workers,
        slurm=slurm, progress=True)
    written: dict[str, Any] = {"bifurcation.csv": table_bytes(res.table, "bifurcation.csv"),
                               "points.parquet": table_bytes(res.points, "points.parquet")}
    if res.checkpoint is not None:
        written["checkpoint.npz"] = state_bytes(res.checkpoint)
    written["bifurcation.png"] = figure_bytes(plots.bifurcation(res.table, res.points, param=param, feature=feature))
    if lyap_steps > 0:
        written["lyapunov.png"] = figure_bytes(plots.lyapunov_curve(res.table, param=param))
    write_result_set(out, written, {"param": param, "start": start, "stop": stop, "num": num}, kind="dynamics-bifurcation")
    if as_json:
        echo_json(records_to_json(res.table))
    else:
        files = ["bifurcation.csv", "points.parquet", "bifurcation.png"] + (["lyapunov.png"] if lyap_steps > 0 else [])
        files += ["checkpoint.npz"] if res.checkpoint is not None else []
        _regimes(res.table["regime" if "regime" in res.table else "regime_distinct"], f"{len(res.table)} values of {param}")
        stderr_console().print(f"wrote {', '.join(files)} to {out}", highlight=False)


@app.command()
def phase(
    x: str = typer.Option("beta_o", "--x", help="Parameter on the x axis."),
    x_start: float = typer.Option(..., "--x-start", help="First value on the x axis."),
    x_stop: float = typer.Option(..., "--x-stop", help="Last value on the x axis (included)."),
    x_num: int = typer.Option(..., "--x-num", help="Number of x values, evenly spaced."),
    y: str = typer.Option("gamma", "--y", help="Parameter on the y axis."),
    y_start: float = typer.Option(..., "--y-start", help="First value on the y axis."),
    y_stop: float = typer.Option(..., "--y-stop", help="Last value on the y axis (included)."),
    y_num: int = typer.Option(..., "--y-num", help="Number of y values, evenly spaced."),
    transient: int = typer.Option(20000, "--transient", help="Steps run first and discarded per grid point, before --steps."),
    steps: int = typer.Option(5000, "--steps", help="Steps averaged for the Lyapunov exponents per grid point, after --transient."),
    exponents: Optional[int] = typer.Option(None, "--exponents", help="Leading exponents (default 2)."),
    color: str = typer.Option("lambda_1", "--color", help="lambda_1 or regime."),
    out: Path = typer.Option(..., "--out", help="Output directory (phase.csv, phase.png, store/)."),
    init_state: Optional[Path] = INIT,
    preset: Optional[str] = PRESET, config: Optional[Path] = CONFIG, weights_seed: Optional[int] = WSEED,
    sets: Optional[List[str]] = SETS,
    executor: str = typer.Option("local", "--executor", help="inline, local or slurm (resumable store in OUT/store)."),
    workers: int = typer.Option(2, "--workers", help="Parallel worker processes (--executor local)."),
    chunk: int = typer.Option(256, "--chunk", help="Grid points per chunk (one task each)."),
    slurm_partition: Optional[str] = SLURM_PARTITION, slurm_time: Optional[int] = SLURM_TIME,
    slurm_mem: Optional[float] = SLURM_MEM,
    threads: Optional[int] = THREADS,
) -> None:
    """2-D sweep (e.g. beta_o x gamma) coloured by lambda_1 or regime, chunked and resumable."""
    use_threads(threads)
    from attnscope import dynamics as dyn
    from attnscope.outputs import write_result_set
    from attnscope.plots import dynamics as plots
    from attnscope.plots.base import figure_bytes
    from attnscope.tables import table_bytes

    if color not in ("lambda_1", "regime"):
        raise InputError("--color must be lambda_1 or regime")
    cfg = _config(preset, config, weights_seed, sets)
    slurm = _slurm(executor, slurm_partition, slurm_time, slurm_mem)
    check_out_names(out, ("phase.csv", "phase.png"))  # before the sweep
    make_out_dir(out)
    df = dyn.phase(cfg, (x, dyn.sweep_values(x_start, x_stop, x_num)), (y, dyn.sweep_values(y_start, y_stop, y_num)),
                   transient=transient, steps=steps, k=exponents, init=init_state, chunk=chunk,
                   store=out / "store", executor="inline" if executor == "none" else executor,
                   workers=workers, slurm=slurm, progress=True)
    write_result_set(out, {"phase.csv": table_bytes(df, "phase.csv"),
                           "phase.png": figure_bytes(plots.phase_diagram(df, x=x, y=y, color=color))},
                     {"x": x, "y": y}, kind="dynamics-phase")
    _regimes(df["regime"], f"{len(df)} grid points ({x} x {y})")
    stderr_console().print(f"wrote phase.csv, phase.png to {out} (chunks in {out / 'store'})", highlight=False)


@app.command()
def finite(
    beta_o: Optional[float] = typer.Option(None, "--beta-o", help="Output inverse temperature (default: the config's)."),
    repeats: Optional[List[int]] = typer.Option(None, "--repeats", help="Column repetition factors (repeatable; default 1..10^4)."),
    steps: int = typer.Option(20, "--steps", help="Steps simulated from x_0, compared at every step."),
    seeds: int = typer.Option(8, "--seeds", help="Independent samples per N."),
    out: Path = typer.Option(..., "--out", help="Output directory (finite.csv, finite.png)."),
    preset: Optional[str] = PRESET, config: Optional[Path] = CONFIG, weights_seed: Optional[int] = WSEED,
    sets: Optional[List[str]] = SETS, gamma: Optional[float] = GAMMA, eps: Optional[float] = EPS,
    as_json: bool = typer.Option(False, "--json", help="Print the table as JSON records on stdout."),
    threads: Optional[int] = THREADS,
) -> None:
    """Finite-N stochastic network vs the mean field: error of the overlaps against N."""
    use_threads(threads)
    from attnscope import dynamics as dyn
    from attnscope.outputs import write_result_set
    from attnscope.plots import dynamics as plots
    from attnscope.plots.base import figure_bytes
    from attnscope.tables import records_to_json, table_bytes

    cfg = _config(preset, config, weights_seed, sets, gamma=gamma, eps=eps, beta_o=beta_o)
    check_out_names(out, ("finite.csv", "finite.png"))  # before the sampling
    df = dyn.finite_size_table(cfg, repeats or (1, 10, 100, 1000, 10000), steps=steps, seeds=seeds)
    write_result_set(out, {"finite.csv": table_bytes(df, "finite.csv"), "finite.png": figure_bytes(plots.finite_size(df))},
                     {"steps": steps, "seeds": seeds}, kind="dynamics-finite")
    if as_json:
        echo_json(records_to_json(df))
        return
    con = stderr_console()
    print_frame(con, f"finite N vs the mean field ({seeds} seeds per N, {steps} steps)", df, keys=2)
    con.print(f"wrote finite.csv, finite.png to {out}", highlight=False)
