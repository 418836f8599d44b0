"""Benchmark: the paper's bifurcation diagram (4001 beta_o values x 120,000 steps).

Simulation (default): the batched numba kernel vs a plain per-value Python loop of the same map (numpy
on one value at a time, like the original code). Both are timed in this run; each is extrapolated to the
full diagram.

    nice .venv/bin/python benchmarks/dynamics_bifurcation.py [--values 4001] [--steps 120000]
        [--baseline-values 3 --baseline-steps 5000] [--lyap-steps 5000] [--md docs/benchmarks/dynamics.md]

``--values`` below 4001 times that many values at the full step count and extrapolates linearly
(the work is the same for every value).

End to end (``--e2e``): the README's command, ``attnscope dynamics bifurcation --preset paper --start 1.24
--stop 1.28 --num 4001 --out zoom``, through the CLI with figures, for this checkout and (``--before-src``)
another checkout's ``src`` (e.g. ``git archive main src | tar -x -C /tmp/before``), alternated
``--repeats`` times in one run; then the figure alone on the run's tables: the vectorised regime join
against the per-point lookup it replaced (a pandas ``.get`` per point in a list comprehension).

    nice .venv/bin/python benchmarks/dynamics_bifurcation.py --e2e [--before-src /tmp/before/src] [--md FILE]
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from attnscope.dynamics import meanfield as mfm
from attnscope.dynamics.lyapunov import lyapunov_spectrum
from attnscope.dynamics.model import load_preset
from attnscope.dynamics.simulate import advance

FULL_VALUES, FULL_STEPS, TRANSIENT = 4001, 120_000, 100_000


def baseline(cfg, betas, steps) -> tuple[float, float]:
    """Wall and CPU seconds per value per step of a plain per-value loop (numpy step, batch of one)."""
    mf = mfm.compile_config(cfg)
    t0, c0 = time.perf_counter(), time.process_time()
    for b in betas:
        beta, g, eps = mfm.params_arrays(cfg, beta_o=[b])
        s = mfm.initial_state(mf, 1)
        saved = []
        for i in range(steps):
            _, mo = mfm.step(mf, s, beta, g, eps)
            if i >= steps // 2:
                saved.append(mo[0].copy())
    n = len(betas) * steps
    return (time.perf_counter() - t0) / n, (time.process_time() - c0) / n


def ours(cfg, n_values, steps, lyap_steps, chunk=256) -> tuple[float, float, float]:
    """Seconds for n_values x steps with the batched kernel (in chunks, as the sweep runs), for
    the Lyapunov estimate (lyap_steps, 2 exponents), and the CPU seconds of the simulation."""
    mf = mfm.compile_config(cfg)
    betas = np.linspace(0, 3, n_values)
    # compile outside the timing
    beta, g, eps = mfm.params_arrays(cfg, beta_o=betas[:2])
    advance(mf, mfm.initial_state(mf, 2), beta, g, eps, 10, transient=5)
    lyapunov_spectrum(mf, mfm.initial_state(mf, 2), beta, g, eps, n_steps=5, k=2)
    t_sim = t_lyap = c_sim = 0.0
    transient = int(steps * TRANSIENT / FULL_STEPS)
    for i in range(0, n_values, chunk):
        beta, g, eps = mfm.params_arrays(cfg, beta_o=betas[i:i + chunk])
        s = mfm.initial_state(mf, beta.size)
        t0, c0 = time.perf_counter(), time.process_time()
        advance(mf, s, beta, g, eps, steps, transient=transient, n_tail=100, max_section=300)
        t1 = time.perf_counter()
        c_sim += time.process_time() - c0
        if lyap_steps:
            lyapunov_spectrum(mf, s, beta, g, eps, n_steps=lyap_steps, k=2)
        t_sim += t1 - t0
        t_lyap += time.perf_counter() - t1
    return t_sim, t_lyap, c_sim


README_ARGS = ["dynamics", "bifurcation", "--preset", "paper", "--start", "1.24", "--stop", "1.28", "--num", "4001"]


def cli_run(src: Path, out: Path) -> tuple[float, float]:
    """Wall and CPU (user + system, all threads) seconds of the README's command with ``src`` on the path."""
    env = dict(os.environ, PYTHONPATH=str(src), ATTNSCOPE_QUIET="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "attnscope", *README_ARGS, "--out", str(out)], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def figure_only(out: Path) -> dict[str, float]:
    """Seconds of the bifurcation figure's parts on a run's tables: the regime of every point by the old
    per-point lookup and by the join, and drawing + saving the figure."""
    import pandas as pd

    from attnscope.plots import dynamics as dp
    from attnscope.plots import save_figure

    values, points = pd.read_csv(out / "bifurcation.csv"), pd.read_parquet(out / "points.parquet")
    keys = ["beta_o"] + (["direction"] if "direction" in values.columns else [])  # as the figure joins
    t0 = time.perf_counter()
    regime = values.set_index(keys)["regime"]
    old = [regime.get(tuple(r) if len(keys) > 1 else r[0], "unknown") for r in points[keys].itertuples(index=False)]
    t1 = time.perf_counter()
    new = dp.point_regimes(values, points, keys, "regime")
    t2 = time.perf_counter()
    assert list(new) == old, "the join must give every point the same regime as the lookup"
    save_figure(dp.bifurcation(values, points), out / "bifurcation_check.png")
    t3 = time.perf_counter()
    return {"points": len(points), "lookup": t1 - t0, "join": t2 - t1, "figure": t3 - t2}


def end_to_end(before_src: Path | None, repeats: int) -> list[str]:
    """Time the README's command for this checkout (and ``before_src``), alternating; markdown lines."""
    here = Path(__file__).resolve().parents[1] / "src"
    sides = [("this checkout", here)] + ([("before", before_src)] if before_src else [])
    load0 = os.getloadavg()[0]
    times: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in sides}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(repeats):
            for name, src in sides if i % 2 == 0 else sides[::-1]:
                times[name].append(cli_run(src, Path(tmp) / f"{name.replace(' ', '_')}_{i}"))
                print(f"{name}: wall {times[name][-1][0]:.1f} s, CPU {times[name][-1][1]:.1f} s", flush=True)
        fig = figure_only(Path(tmp) / "this_checkout_0")
    load1 = os.getloadavg()[0]
    lines = [
        "## dynamics: the README's zoom diagram end to end through the CLI",
        "",
        f"`attnscope {' '.join(README_ARGS)} --out zoom` (4001 values x 120,000 steps, the protocol's checkpoint "
        "run, 5000-step Lyapunov estimates, `bifurcation.csv`, `points.parquet`, `bifurcation.png`, `lyapunov.png`).",
        f"Machine: {os.cpu_count()} cores shared with other jobs, load average {load0:.1f} -> {load1:.1f} during "
        "the run; read the CPU column and the ratios, not absolute wall times.",
        "",
        "| | wall (s) | CPU, all threads (s) |",
        "|---|---|---|",
    ]
    for name, runs in times.items():
        for wall, cpu in runs:
            lines.append(f"| {name} | {wall:.1f} | {cpu:.1f} |")
    if before_src:
        best = {name: min(w for w, _ in runs) for name, runs in times.items()}
        cpu = {name: min(c for _, c in runs) for name, runs in times.items()}
        lines += ["", f"Before / after: **{best['before'] / best['this checkout']:.2f}x** wall, "
                      f"**{cpu['before'] / cpu['this checkout']:.2f}x** CPU (best of each side)."]
    lines += [
        "",
        f"The figure alone on this run's tables ({fig['points']:,} points): regime of every point by the old "
        f"per-point `.get` {fig['lookup']:.1f} s, by the join {fig['join']:.2f} s "
        f"(**{fig['lookup'] / fig['join']:.0f}x**, identical labels); drawing and saving the PNG {fig['figure']:.1f} s.",
        "",
    ]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", type=int, default=FULL_VALUES)
    ap.add_argument("--steps", type=int, default=FULL_STEPS)
    ap.add_argument("--baseline-values", type=int, default=3)
    ap.add_argument("--baseline-steps", type=int, default=5000)
    ap.add_argument("--lyap-steps", type=int, default=5000)
    ap.add_argument("--md", default=None, help="write a markdown section here")
    ap.add_argument("--e2e", action="store_true", help="time the README's command end to end through the CLI")
    ap.add_argument("--before-src", type=Path, default=None, help="--e2e: also time this src directory")
    ap.add_argument("--repeats", type=int, default=1, help="--e2e: runs per side (alternated)")
    ap.add_argument("--figure-only", type=Path, default=None, help="time only the figure on this --out directory")
    a = ap.parse_args()
    if a.figure_only:
        print(figure_only(a.figure_only))
        return
    if a.e2e:
        text = "\n".join(end_to_end(a.before_src, a.repeats))
        print(text)
        if a.md:
            from attnscope.tables import atomic_write_text

            atomic_write_text(a.md, text)
        return
    cfg = load_preset("paper")
    import numba

    load0 = os.getloadavg()[0]
    per_step_base, cpu_step_base = baseline(cfg, np.linspace(1.24, 1.28, a.baseline_values), a.baseline_steps)
    t_sim, t_lyap, c_sim = ours(cfg, a.values, a.steps, a.lyap_steps)
    load1 = os.getloadavg()[0]
    scale = (FULL_VALUES / a.values) * (FULL_STEPS / a.steps)
    full_ours = t_sim * scale
    full_lyap = t_lyap * FULL_VALUES / a.values
    base_value = per_step_base * FULL_STEPS
    full_base = base_value * FULL_VALUES
    ratio = full_base / full_ours
    lines = [
        "## dynamics: bifurcation diagram of the paper configuration",
        "",
        f"Machine: {os.cpu_count()} cores, numba threads {numba.get_num_threads()}, load average "
        f"{load0:.1f} -> {load1:.1f} during the run (shared with other jobs).",
        "",
        "| | measured | per value (120,000 steps) | full diagram (4001 values) |",
        "|---|---|---|---|",
        f"| per-value Python loop (numpy step, baseline) | {a.baseline_values} values x {a.baseline_steps} steps: "
        f"{per_step_base * 1e6:.1f} us/step | {base_value:.1f} s | {full_base / 3600:.1f} h (extrapolated) |",
        f"| attnscope, batched numba kernel | {a.values} values x {a.steps} steps: {t_sim:.1f} s | "
        f"{t_sim / a.values * FULL_STEPS / a.steps * 1e3:.1f} ms | {full_ours:.1f} s"
        f"{' (extrapolated)' if scale != 1 else ''} |",
        f"| + Lyapunov lambda_1, lambda_2 ({a.lyap_steps} steps per value) | {t_lyap:.1f} s | "
        f"{t_lyap / a.values * 1e3:.1f} ms | {full_lyap:.1f} s |",
        "",
        f"Speed-up of the simulation over the per-value loop: **{ratio:,.0f}x** in wall time "
        f"(diagram {full_ours:.0f} s vs {full_base / 3600:.1f} h), **{cpu_step_base * a.values * a.steps / c_sim:,.0f}x** "
        f"in CPU time.",
        "",
        f"CPU time (load-independent): baseline {cpu_step_base * 1e6:.1f} us per value-step, attnscope "
        f"{c_sim / (a.values * a.steps) * 1e9:.0f} ns per value-step summed over threads, i.e. "
        f"{c_sim * scale:.0f} CPU-s for the full diagram = **{c_sim * scale / numba.get_num_threads():.0f} s "
        f"on {numba.get_num_threads()} free cores** (target: < 60 s).",
        "",
    ]
    text = "\n".join(lines)
    print(text)
    if a.md:
        from attnscope.tables import atomic_write_text

        atomic_write_text(a.md, text)


if __name__ == "__main__":
    main()
