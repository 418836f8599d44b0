"""GPU benchmark: sparse patterns through FlexAttention vs flash causal SDPA and the gathered kernel.

One attention layer, forward + backward, b=4, h=8, e=64, bf16, the ``byte-sparse-8h`` pattern, at
each ``--length``: ``sparse_attention(impl="flex")`` (the CUDA default), ``impl="gather"`` (the CPU
kernel run on the GPU), and ``F.scaled_dot_product_attention(is_causal=True)`` (flash, no pattern).
Time = median of ``--repeats`` CUDA-event timings after warm-up (compilation excluded); memory =
``torch.cuda.max_memory_allocated`` during one step, each variant measured after a reset.

    python benchmarks/sparse_attention_gpu.py [--length 4096 --length 16384] [--md FILE]

Needs a CUDA device; prints one line and exits 2 without one.
"""

from __future__ import annotations

import argparse
import statistics
import sys


def measure(fn, q, k, v, repeats: int) -> tuple[float, float]:
    import torch

    for _ in range(3):  # warm-up: compilation, block-mask construction, autotuning
        fn(q, k, v).sum().backward()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        q.grad = k.grad = v.grad = None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(q, k, v).sum().backward()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    q.grad = k.grad = v.grad = None
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    fn(q, k, v).sum().backward()
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    return statistics.median(times), peak


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--length", type=int, action="append", default=None)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--md", default=None)
    a = ap.parse_args()
    import torch
    import torch.nn.functional as F

    from attnscope.sparse import load_pattern, sparse_attention

    if not torch.cuda.is_available():
        print("sparse_attention_gpu: needs a CUDA device", file=sys.stderr)
        sys.exit(2)
    lengths = a.length or [4096, 16384]
    pat = load_pattern("byte-sparse-8h")
    variants = {
        "attnscope flex (byte-sparse-8h)": lambda q, k, v: sparse_attention(q, k, v, pat, causal=True, impl="flex"),
        "attnscope gathered (byte-sparse-8h)": lambda q, k, v: sparse_attention(q, k, v, pat, causal=True, impl="gather"),
        "flash causal SDPA (no pattern)": lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }
    rows = [f"Device: {torch.cuda.get_device_name()}, torch {torch.__version__}, bf16, b=4, h=8, e=64.", "",
            "| L | density at L 4096 | implementation | fwd+bwd (ms) | peak memory (MB) | vs flash |", "|---|---|---|---|---|---|"]
    for L in lengths:
        torch.manual_seed(0)
        q, k, v = (torch.randn(4, 8, L, 64, device="cuda", dtype=torch.bfloat16, requires_grad=True) for _ in range(3))
        res = {name: measure(fn, q, k, v, a.repeats) for name, fn in variants.items()}
        flash = res["flash causal SDPA (no pattern)"][0]
        density = pat.density(min(L, 4096), causal=True)
        for name, (ms, mb) in res.items():
            rows.append(f"| {L} | {100 * density:.1f}% | {name} | {ms:.2f} | {mb:.0f} | {flash / ms:.2f}x |")
    text = "\n".join(rows) + "\n"
    print(text)
    if a.md:
        from attnscope.tables import atomic_write_text

        atomic_write_text(a.md, text)


if __name__ == "__main__":
    main()
