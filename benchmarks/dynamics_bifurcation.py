"""Benchmark: the paper's bifurcation diagram (4001 beta_o values x 120,000 steps) with the batched
numba kernel vs a plain per-value Python loop of the same map (numpy on one value at a time, like
the original code). Both are timed in this run; each is extrapolated to the full diagram.

    nice .venv/bin/python benchmarks/dynamics_bifurcation.py [--values 4001] [--steps 120000]
        [--baseline-values 3 --baseline-steps 5000] [--lyap-steps 5000] [--md docs/benchmarks/dynamics.md]

``--values`` below 4001 times that many values at the full step count and extrapolates linearly
(the work is the same for every value).
"""

from __future__ import annotations

import argparse
import os
import time

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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--values", type=int, default=FULL_VALUES)
    ap.add_argument("--steps", type=int, default=FULL_STEPS)
    ap.add_argument("--baseline-values", type=int, default=3)
    ap.add_argument("--baseline-steps", type=int, default=5000)
    ap.add_argument("--lyap-steps", type=int, default=5000)
    ap.add_argument("--md", default=None, help="write a markdown section here")
    a = ap.parse_args()
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
