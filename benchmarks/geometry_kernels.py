"""Benchmark the per-head geometry kernel variants on one Llama-3-8B-shaped layer (weights in memory).

Variants, all computing ||M_h||_F^2, tr(M_h M_h) and the row/column norms of every head's M_h:

* ``ours``          attnscope.geometry.kernels.head_stats (no copies, BLAS single-threaded);
* ``ours-threads``  the same with the BLAS default thread count (ATTNSCOPE_KERNEL_THREADS=default);
* ``loop-de``       a per-head Python loop of 2-D products on [d, e] factors (the obvious port);
* ``explicit``      M_h materialised (d x d), s and norms from it (the paper's approach), on the same
                    float32 tensors in memory (like for like).

Repetitions are interleaved so machine load hits every variant alike; the best of N is reported,
as wall time and as CPU time (process time of all threads: the compute itself, which a shared
machine's load does not inflate).
The machine's limit: a single-threaded 1024^3 float32 GEMM (timed in the same interleaved loop)
gives the GFLOP/s one core sustains; the FLOP floor is the
~3.5 d e^2 multiply-adds per head the factored formulas need (issue 11), so the floor time is
7 d e^2 / that rate. ``ours`` does 3.5 d e^2 + 0.5 d e^2 / r (K^T K once per group, by syrk).

    nice python benchmarks/geometry_kernels.py [--reps 3] [--heads 8]
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

D, N_Q, N_KV, E = 4096, 32, 8, 128
PEAK_N = 1024  # the square GEMM that measures one core's float32 rate


def loop_de(q: np.ndarray, k: np.ndarray) -> None:
    r = q.shape[0] // k.shape[0]
    for h in range(q.shape[0]):
        qh, kh = q[h], k[h // r]
        a, b = qh.T @ qh, kh.T @ kh
        x = kh.T @ qh
        float((a * b).sum()), float((x * x.T).sum())
        ((qh @ b) * qh).sum(1), ((kh @ a) * kh).sum(1)


def explicit(q: np.ndarray, k: np.ndarray) -> None:
    from attnscope.geometry.kernels import explicit_stats

    r = q.shape[0] // k.shape[0]
    for h in range(q.shape[0]):
        explicit_stats(q[h] @ k[h // r].T).directionality()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--heads", type=int, default=8, help="query heads per call (kv heads = heads / 4)")
    ap.add_argument("--md", type=str, default=None, help="append the markdown section to this file")
    args = ap.parse_args()

    from attnscope.geometry.kernels import head_stats

    rng = np.random.default_rng(0)
    h, g = args.heads, max(1, args.heads // (N_Q // N_KV))
    wq = (0.02 * rng.standard_normal((h * E, D))).astype(np.float32)  # nn.Linear layout [(h e), d]
    wk = (0.02 * rng.standard_normal((g * E, D))).astype(np.float32)
    q = wq.reshape(h, E, D).transpose(0, 2, 1)  # [h, d, e] view, as a family spec hands it over
    k = wk.reshape(g, E, D).transpose(0, 2, 1)
    qc, kc = np.ascontiguousarray(q), np.ascontiguousarray(k)

    from attnscope.geometry.kernels import kernel_threads

    square = rng.standard_normal((PEAK_N, PEAK_N)).astype(np.float32)

    peak_cpu = [float("inf")]  # best CPU seconds of one square GEMM (short calls: the best of several)

    def gemm() -> None:  # the machine's limit: one core's large square float32 GEMM
        with kernel_threads():
            for _ in range(4):
                c0 = time.process_time()
                square @ square
                peak_cpu[0] = min(peak_cpu[0], time.process_time() - c0)

    def ours_threads() -> None:
        old = os.environ.get("ATTNSCOPE_KERNEL_THREADS")
        os.environ["ATTNSCOPE_KERNEL_THREADS"] = "default"
        try:
            head_stats(q, k).directionality()
        finally:
            os.environ.pop("ATTNSCOPE_KERNEL_THREADS") if old is None else os.environ.update(ATTNSCOPE_KERNEL_THREADS=old)

    variants = {
        "ours": lambda: head_stats(q, k).directionality(),
        "ours-threads": ours_threads,
        "loop-de": lambda: loop_de(qc, kc),
        "gemm (limit)": lambda: gemm(),
        "explicit": lambda: explicit(q, k),
    }
    wall = {name: float("inf") for name in variants}
    cpu = dict(wall)
    for _ in range(args.reps):
        for name, fn in variants.items():
            t0, c0 = time.perf_counter(), time.process_time()
            fn()
            wall[name] = min(wall[name], (time.perf_counter() - t0) / h)
            cpu[name] = min(cpu[name], (time.process_time() - c0) / h)
    load = os.getloadavg()[0]
    r = h // g
    rate = 2 * PEAK_N**3 / peak_cpu[0]  # flop/s of one core, large square GEMM (CPU time)
    flops = {"ours": 2 * (3.5 + 0.5 / r) * D * E * E, "loop-de": 2 * 5 * D * E * E, "explicit": 2 * D * D * E + 4 * D * D}
    flops["ours-threads"] = flops["ours"]
    floor = 7 * D * E * E / rate
    lines = [
        f"### Kernel variants (benchmarks/geometry_kernels.py; {h} heads of d={D}, d_h={E}, best of {args.reps}, "
        f"load average {load:.1f} on {os.cpu_count()} shared cores)",
        "",
        f"One core's float32 GEMM ({PEAK_N} x {PEAK_N} squared, BLAS single-threaded): **{rate / 1e9:.0f} GFLOP/s** "
        f"(CPU time); FLOP floor (3.5 d d_h^2 multiply-adds = {7 * D * E * E / 1e9:.2f} GFLOP per head) at that rate: "
        f"**{floor * 1e3:.1f} ms/head**. Wall time is what a user waits on this shared machine; CPU time "
        "(process time, all threads) is the compute itself, which load does not inflate.",
        "",
        "| variant | wall ms/head | CPU ms/head | GFLOP/s (CPU) | explicit / variant (wall) | explicit / variant (CPU) |",
        "|---|---|---|---|---|---|",
    ]
    for name in variants:
        if name == "gemm (limit)":
            continue
        lines.append(
            f"| {name} | {wall[name] * 1e3:.1f} | {cpu[name] * 1e3:.1f} | {flops[name] / cpu[name] / 1e9:.0f} | "
            f"{wall['explicit'] / wall[name]:.1f}x | {cpu['explicit'] / cpu[name]:.1f}x |"
        )
    lines.append(f"| FLOP floor (1 core) | - | {floor * 1e3:.1f} | {rate / 1e9:.0f} | - | {cpu['explicit'] / floor:.1f}x |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.md:
        from pathlib import Path

        from attnscope.tables import atomic_write_text

        path = Path(args.md)
        old = path.read_text() if path.is_file() else ""
        atomic_write_text(path, old + ("\n" if old else "") + text)


if __name__ == "__main__":
    main()
