"""GPU benchmark: sparse patterns through FlexAttention vs flash causal SDPA and the gathered kernel.

One attention layer, forward + backward, b=4, h=8, e=64, bf16, the ``byte-sparse-8h`` pattern, at
each ``--length``: ``sparse_attention(impl="flex")`` (the CUDA default), ``impl="gather"`` (the CPU
kernel run on the GPU), and ``F.scaled_dot_product_attention(is_causal=True)`` (flash, no pattern).
Time = median of ``--repeats`` CUDA-event timings after warm-up (compilation excluded); memory =
``torch.cuda.max_memory_allocated`` during one step, each variant measured after a reset.

    python benchmarks/sparse_attention_gpu.py [--length 4096 --length 16384] [--md FILE]

Before timing, every pattern implementation is checked against the explicit float32 dense masked
reference at the first length (at most 2048; float32 inputs rounded from the same bf16 tensors): its largest
error in the output and in each gradient must be at most 2x the error dense SDPA with the same mask makes in
bf16 (:mod:`attnscope.sparse.exactness`); a failure exits 1 and nothing is timed. The table also gives the
pattern's block density (128 x 128 blocks FlexAttention computes over dense causal attention's).

Needs a CUDA device; prints one line and exits 2 without one. ``--smoke`` runs the same code tiny on
whatever device is there (on CPU without FlexAttention, which has no CPU backward): it checks the script,
not the speed (the test suite runs it).
"""

from __future__ import annotations

import argparse
import statistics
import sys


def sync(device) -> None:  # noqa: ANN001 - a torch.device
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def measure(fn, q, k, v, repeats: int) -> tuple[float, float | None]:
    """Median fwd+bwd milliseconds over ``repeats`` after warm-up, and peak MB (CUDA only)."""
    import time

    import torch

    cuda = q.device.type == "cuda"
    for _ in range(3):  # warm-up: compilation, block-mask construction, autotuning
        fn(q, k, v).sum().backward()
    sync(q.device)
    times = []
    for _ in range(repeats):
        q.grad = k.grad = v.grad = None
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(q, k, v).sum().backward()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn(q, k, v).sum().backward()
            times.append(1000 * (time.perf_counter() - t0))
    q.grad = k.grad = v.grad = None
    if not cuda:
        return statistics.median(times), None
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn(q, k, v).sum().backward()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    return statistics.median(times), peak


def check_exact(variants: dict, pat, L: int, b: int, e: int, device, dtype) -> list[str]:
    """Each pattern variant against the float32 dense masked reference (same inputs), held to the error dense
    SDPA makes in ``dtype`` (:mod:`attnscope.sparse.exactness`: at most 2x it, per output and gradient).

    Returns one line per variant with its errors; raises SystemExit(1) on a failure."""
    from attnscope.sparse.exactness import failures, low_precision_errors, summary

    lines = []
    for name, fn in variants.items():
        if "pattern" in name:  # the flash baseline computes another function
            continue
        errors = low_precision_errors(fn, pat, L, b, e, device, dtype)
        bad = failures(errors)
        if bad:
            raise SystemExit(f"sparse_attention_gpu: {name} differs from the dense reference by more than 2x dense "
                             f"SDPA's own error: {'; '.join(bad)}")
        lines.append(f"{name}: output and gradients within 2x dense SDPA's error against the float32 dense masked "
                     f"reference (L {L}; largest errors: {summary(errors)})")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--length", type=int, action="append", default=None)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--md", default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on any device (CPU too): checks the script only")
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F

    from attnscope.sparse import load_pattern, sparse_attention
    from attnscope.sparse.layout import layout_stats

    cuda = torch.cuda.is_available()
    if not cuda and not a.smoke:
        print("sparse_attention_gpu: needs a CUDA device (--smoke runs it tiny on CPU)", file=sys.stderr)
        sys.exit(2)
    device = torch.device("cuda" if cuda else "cpu")
    if not cuda:
        torch.set_num_threads(1)  # a smoke run on a shared CPU: no thread oversubscription
    dtype = torch.bfloat16 if cuda else torch.float32
    b, h, e = (4, 8, 64) if not a.smoke else (1, 8, 16)
    lengths = a.length or ([4096, 16384] if not a.smoke else [256])
    repeats = a.repeats if not a.smoke else 2
    pat = load_pattern("byte-sparse-8h")
    variants = {}
    if cuda:  # FlexAttention has no backward on CPU
        variants["attnscope flex (byte-sparse-8h)"] = lambda q, k, v: sparse_attention(q, k, v, pat, causal=True, impl="flex")
    variants["attnscope gathered (byte-sparse-8h)"] = lambda q, k, v: sparse_attention(q, k, v, pat, causal=True, impl="gather")
    variants["flash causal SDPA (no pattern)"] = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)
    checks = check_exact(variants, pat, min(lengths[0], 2048), b, e, device, dtype)
    print("\n".join(checks), flush=True)
    where = torch.cuda.get_device_name() if cuda else "CPU (smoke run: not a measurement)"
    rows = [f"Device: {where}, torch {torch.__version__}, {str(dtype).removeprefix('torch.')}, b={b}, h={h}, e={e}.",
            "", *checks, "",
            "| L | entry density | block density | implementation | fwd+bwd (ms) | peak memory (MB) | vs flash |",
            "|---|---|---|---|---|---|---|"]
    for L in lengths:
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, h, L, e, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
        res = {name: measure(fn, q, k, v, repeats) for name, fn in variants.items()}
        flash = res["flash causal SDPA (no pattern)"][0]
        stats = layout_stats(pat, L, causal=True)
        for name, (ms, mb) in res.items():
            mem = "-" if mb is None else f"{mb:.0f}"
            rows.append(f"| {L} | {100 * stats['entry_density']:.1f}% | {100 * stats['block_density']:.1f}% | {name} "
                        f"| {ms:.2f} | {mem} | {flash / ms:.2f}x |")
    text = "\n".join(rows) + "\n"
    print(text)
    if a.md:
        from attnscope.tables import atomic_write_text

        atomic_write_text(a.md, text)


if __name__ == "__main__":
    main()
