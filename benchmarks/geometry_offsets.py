"""Benchmark position-aware geometry on one Llama-3-8B-shaped layer: factored per-offset scores vs explicit d x d.

Layer: d 4096, 32 query heads, 8 kv heads, head dim 128, half-split rotary with base 500000 (random
float32 factors in memory). Side by side, in one run:

* ``symmetry``  :func:`attnscope.geometry.rotary.offset_symmetry`: s of every head at every offset
                (O(e^2) per head and offset after the Grams), on ALL the offsets asked for;
* ``full``      :func:`attnscope.geometry.rotary.offset_head_stats`: s and d (row/column norms: one
                [d, e] x [e, e] product each per head and offset), timed on ``--full-offsets`` offsets
                and extrapolated linearly to all of them (said so in the output);
* ``explicit``  the baseline: per head and offset, M_o = Q G(o) K^T materialised (d x d) and scored
                with ``explicit_stats`` (s, row and column norms), timed on ``--explicit-pairs``
                (head, offset) pairs and extrapolated.

Agreement: the factored s and d against the explicit ones on the timed pairs. Times are wall clock,
best of ``--reps``; BLAS single-threaded in the factored kernels (the project's default), default
threads in the explicit GEMM.

    python benchmarks/geometry_offsets.py [--offsets 4096] [--full-offsets 16] [--explicit-pairs 4] [--md FILE]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np
from _markdown import emit  # benchmarks/: print the section, append it to docs

D, N_Q, N_KV, E, BASE = 4096, 32, 8, 128, 500000.0


CPU: dict[str, float] = {}


def _best(fn, reps: int, name: str) -> tuple[float, object]:
    """Best wall time of ``reps`` runs (and the CPU time of that run, all threads, in CPU[name])."""
    best, out = float("inf"), None
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        if wall < best:
            best, CPU[name] = wall, cpu
    return best, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--offsets", type=int, default=4096, help="offsets 0..N-1 for the symmetry sweep (default 4096)")
    ap.add_argument("--full-offsets", type=int, default=16, help="offsets timed for s+d (extrapolated to --offsets)")
    ap.add_argument("--explicit-pairs", type=int, default=4, help="(head, offset) pairs timed explicitly")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--md", type=str, default=None, help="append the markdown section to this file")
    args = ap.parse_args()

    from attnscope.families.rope import HALF_SPLIT, default_inv_freq, make_layout
    from attnscope.geometry.kernels import explicit_stats
    from attnscope.geometry.rotary import offset_form, offset_head_stats, offset_symmetry

    rng = np.random.default_rng(0)
    q = rng.standard_normal((N_Q, D, E), dtype=np.float32)
    k = rng.standard_normal((N_KV, D, E), dtype=np.float32)
    k[:, :40] *= 4.0  # a few dominant key rows: directionality is not trivially 0
    lay = make_layout(E, E, default_inv_freq(BASE, E), HALF_SPLIT)
    offs = list(range(args.offsets))
    full_offs = offs[:: max(1, len(offs) // args.full_offsets)][: args.full_offsets]
    r = N_Q // N_KV

    t_sym, sym = _best(lambda: offset_symmetry(q, k, lay, offs), args.reps, "sym")
    t_full, full = _best(lambda: offset_head_stats(q, k, lay, full_offs), args.reps, "full")
    pairs = [(h, full_offs[i % len(full_offs)]) for i, h in enumerate(np.linspace(0, N_Q - 1, args.explicit_pairs,
                                                                                   dtype=int))]  # fmt: skip

    def explicit() -> list:
        out = []
        for h, o in pairs:
            m = (q[h] @ (offset_form(np.eye(E, dtype=np.float32), k[h // r], lay, o).astype(np.float32))).astype(
                np.float32)  # Q G K^T: G K^T first (e x d), then the d x d product
            out.append(explicit_stats(m[None]))
        return out

    t_exp, exp = _best(explicit, 1, "exp")
    err_s = err_d = 0.0
    for (h, o), st in zip(pairs, exp):
        i = full_offs.index(o)
        err_s = max(err_s, abs(float(st.symmetry[0]) - float(full[i].symmetry[h])), abs(float(st.symmetry[0]) - sym[o, h]))
        err_d = max(err_d, abs(float(st.directionality()[0][0]) - float(full[i].directionality()[0][h])))

    per_exp = t_exp / len(pairs)
    per_full = t_full / (len(full_offs) * N_Q)
    total_exp = per_exp * N_Q * len(offs)
    total_full = per_full * N_Q * len(offs)
    cpu_exp_total = CPU["exp"] / len(pairs) * N_Q * len(offs)
    lines = [
        f"## Position-aware geometry: {len(offs)} offsets x {N_Q} heads of a Llama-3-8B-shaped layer",
        "",
        f"Command: `python benchmarks/geometry_offsets.py --offsets {args.offsets} --full-offsets {args.full_offsets} "
        f"--explicit-pairs {args.explicit_pairs}`; machine: {os.cpu_count()} CPU cores; load average "
        f"{os.getloadavg()[0]:.1f} at the end. Wall times, best of {args.reps} (explicit: one run).",
        "",
        "| route | measured (wall / CPU) | per head and offset (wall) | all heads x all offsets (wall) | vs explicit "
        "(wall / CPU) |",
        "|---|---|---|---|---|",
        f"| symmetry s only, factored (`offset_symmetry`) | {len(offs)} offsets x {N_Q} heads: {t_sym:.2f} s / "
        f"{CPU['sym']:.2f} s | {1e3 * t_sym / (N_Q * len(offs)):.3f} ms | **{t_sym:.1f} s** (measured) | "
        f"**{total_exp / t_sym:.0f}x** / {cpu_exp_total / CPU['sym']:.0f}x |",
        f"| s and d, factored (`offset_head_stats`) | {len(full_offs)} offsets x {N_Q} heads: {t_full:.2f} s / "
        f"{CPU['full']:.2f} s | {1e3 * per_full:.2f} ms | {total_full:.0f} s (extrapolated) | "
        f"**{per_exp / per_full:.1f}x** / {(CPU['exp'] / len(pairs)) / (CPU['full'] / (len(full_offs) * N_Q)):.1f}x |",
        f"| explicit d x d per head and offset (baseline) | {len(pairs)} (head, offset) pairs: {t_exp:.2f} s / "
        f"{CPU['exp']:.2f} s | {1e3 * per_exp:.0f} ms | {total_exp:.0f} s (extrapolated) | 1x |",
        "",
        f"Agreement with the explicit route on the timed pairs: |s| {err_s:.1e}, |d| {err_d:.1e}.",
        "",
    ]
    emit("\n".join(lines), args.md)


if __name__ == "__main__":
    main()
