"""GPU benchmark: sparse patterns through FlexAttention vs flash causal SDPA and the gathered kernel.

One attention layer, b=4, h=8, e=64, bf16, the ``byte-sparse-8h`` pattern, at each ``--length`` (default
4096, 16384, 65536): ``sparse_attention(impl="flex")`` (the CUDA default: kernel options from
:mod:`attnscope.sparse.tuning`, the table ``mask_mod``), the same through a kept plan (:func:`attnscope.sparse.flex.attend`, as a model's
attention runs it, without the per-call set-up), ``impl="gather"`` (the CPU kernel run on the
GPU; up to ``--gather-max``), and ``F.scaled_dot_product_attention(is_causal=True)`` (flash, no pattern).
Forward (autograd recording, as in training) and forward + backward are timed separately, backward =
their difference; time = median of ``--repeats`` CUDA-event timings after warm-up (compilation excluded);
peak memory = ``torch.cuda.max_memory_allocated`` above the inputs during one fwd+bwd, after a reset.
Each row names the kernel options used and its ratios to flash (time: flash / ours, > 1 is faster;
memory: ours / flash, <= 1 is less). ``--sweep L`` adds, at that length, the variants the table was
chosen from: FlexAttention's default tiles, 64 x 64, 128 x 64 (8 warps, 2 stages) and the arithmetic ``mask_mod``
instead of the table one; ``--sweep-autotune`` adds autotune (:func:`attnscope.sparse.tuning.autotune`).

    python benchmarks/sparse_attention_gpu.py [--length 4096 --length 16384] [--sweep 16384] [--md FILE]

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


def _median_ms(step, cuda: bool, repeats: int) -> float:
    import time

    import torch

    times = []
    for _ in range(repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            step()
            times.append(1000 * (time.perf_counter() - t0))
    return statistics.median(times)


def measure(fn, q, k, v, repeats: int) -> dict:
    """Median forward and fwd+bwd milliseconds over ``repeats`` after warm-up, backward as their difference,
    and peak MB above the inputs during one fwd+bwd (CUDA only, else None)."""
    import torch

    cuda = q.device.type == "cuda"

    def both():
        q.grad = k.grad = v.grad = None
        fn(q, k, v).float().sum().backward()

    for _ in range(3):  # warm-up: compilation, block-mask construction, autotuning
        both()
    sync(q.device)
    fwd = _median_ms(lambda: fn(q, k, v), cuda, repeats)
    total = _median_ms(both, cuda, repeats)
    q.grad = k.grad = v.grad = None
    peak = None
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        both()
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20
        q.grad = k.grad = v.grad = None
    return {"fwd": fwd, "total": total, "bwd": total - fwd, "peak": peak}


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


FLASH = "flash causal SDPA (no pattern)"
FLEX = "attnscope flex (byte-sparse-8h)"
GATHER = "attnscope gathered (byte-sparse-8h)"
PLANNED = "attnscope flex, kept plan (as in a model)"


def variants_at(L: int, a, pat, cuda: bool) -> dict:
    """name -> (fn(q, k, v), kernel-options cell) of the implementations timed at length L."""
    import torch.nn.functional as F

    from attnscope.sparse import sparse_attention
    from attnscope.sparse import tuning
    from attnscope.sparse.flex import flex_sparse_attention

    out = {}
    if cuda:  # FlexAttention has no backward on CPU
        out[FLEX] = (lambda q, k, v: sparse_attention(q, k, v, pat, causal=True, impl="flex"), None)
        kept: dict = {}  # the plan, made on the first call: what a model's attention keeps and runs

        def planned(q, k, v):
            from attnscope.sparse.attention import flex_plan
            from attnscope.sparse.flex import attend

            key = (tuple(q.shape), q.dtype, q.requires_grad)
            if key not in kept:
                kept[key] = flex_plan(q, k, v, pat, causal=True)
            return attend(q, k, v, kept[key])

        out[PLANNED] = (planned, None)
        if L in (a.sweep or []):
            scale = 64 ** -0.5
            for label, options in (("default tiles", {}), ("64 x 64", {"BLOCK_M": 64, "BLOCK_N": 64}),
                                   ("128 x 64", {"BLOCK_M": 128, "BLOCK_N": 64, "num_warps": 8, "num_stages": 2})):
                out[f"flex, {label}"] = (lambda q, k, v, o=options: flex_sparse_attention(q, k, v, pat, True, scale, o),
                                         tuning.describe(options))
            out["flex, arithmetic mask_mod"] = (lambda q, k, v: flex_sparse_attention(q, k, v, pat, True, scale,
                                                                                      None, mask="arith"), None)

            def tuned(q, k, v):
                tuning.set_mode("autotune")
                try:
                    return sparse_attention(q, k, v, pat, causal=True, impl="flex")
                finally:
                    tuning.set_mode(None)

            if a.sweep_autotune:
                out["flex, autotuned"] = (tuned, "autotune")
    if L <= a.gather_max:
        out[GATHER] = (lambda q, k, v: sparse_attention(q, k, v, pat, causal=True, impl="gather"), "-")
    out[FLASH] = (lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True), "-")
    return out


def options_cell(cell, q, k, v, pat) -> str:
    """The kernel options a variant used: given, or what this process chose for these inputs."""
    if cell == "autotune":
        from attnscope.sparse import tuning

        tuning.set_mode("autotune")
        try:
            return options_cell(None, q, k, v, pat)
        finally:
            tuning.set_mode(None)
    if cell is not None:
        return cell
    from attnscope.sparse import tuning
    from attnscope.sparse.flex import options_for

    options, why = options_for(q, k, v, pat, True, q.shape[-1] ** -0.5)
    return f"{tuning.describe(options)} ({why.split(':')[0]})"


def lengths_of(a) -> list[int]:
    """The sequence lengths timed: --length, else 4096, 16384, 65536 (--smoke: 256)."""
    return a.length or ([4096, 16384, 65536] if not a.smoke else [256])


def bad_arguments(a) -> str | None:
    """The first argument the run could not use, as one sentence (None: all usable)."""
    for name, values, least in (("--length", a.length or [], 1), ("--sweep", a.sweep or [], 1),
                                ("--repeats", [a.repeats], 1), ("--gather-max", [a.gather_max], 0)):
        low = [x for x in values if x < least]
        if low:
            return f"{name} must be at least {least}, not {low[0]}"
    missing = [x for x in a.sweep or [] if x not in lengths_of(a)]
    if missing:  # the sweep runs only at a timed length: it would be skipped without a word
        return f"--sweep {missing[0]} is not one of the lengths timed ({', '.join(map(str, lengths_of(a)))}); add --length {missing[0]}"
    if a.sweep_autotune and not a.sweep:
        return "--sweep-autotune autotunes at the --sweep lengths; give one (e.g. --sweep 16384)"
    from _markdown import unwritable  # benchmarks/, beside this script

    return unwritable(a.md)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--length", type=int, action="append", default=None)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--gather-max", type=int, default=16384, help="time the gathered kernel up to this length")
    ap.add_argument("--sweep", type=int, action="append", default=None,
                    help="at this length also time the kernel-option and mask variants (repeatable)")
    ap.add_argument("--sweep-autotune", action="store_true",
                    help="with --sweep: also autotune (compiles every candidate: minutes)")
    ap.add_argument("--md", default=None)
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on any device (CPU too): checks the script only")
    a = ap.parse_args()
    bad = bad_arguments(a)
    if bad:  # before the device check and any timing
        print(f"sparse_attention_gpu: {bad}", file=sys.stderr)
        sys.exit(2)
    import torch

    from attnscope.sparse import load_pattern
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
    lengths = lengths_of(a)
    repeats = a.repeats if not a.smoke else 2
    pat = load_pattern("byte-sparse-8h")
    first = variants_at(min(lengths[0], 2048), a, pat, cuda)
    checks = check_exact({n: fn for n, (fn, _) in first.items() if "autotuned" not in n}, pat,
                         min(lengths[0], 2048), b, e, device, dtype)
    print("\n".join(checks), flush=True)
    where = torch.cuda.get_device_name() if cuda else "CPU (smoke run: not a measurement)"
    rows = [f"Device: {where}, torch {torch.__version__}, {str(dtype).removeprefix('torch.')}, b={b}, h={h}, e={e}.",
            "", *checks, "",
            "| L | entry density | block density | full blocks | implementation | kernel options | fwd (ms) "
            "| bwd (ms) | fwd+bwd (ms) | vs flash fwd | vs flash fwd+bwd | peak memory (MB) | memory vs flash |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for L in lengths:
        torch.manual_seed(0)
        q, k, v = (torch.randn(b, h, L, e, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
        res, cells = {}, {}
        for name, (fn, cell) in variants_at(L, a, pat, cuda).items():
            res[name] = measure(fn, q, k, v, repeats)
            cells[name] = options_cell(cell, q, k, v, pat)
            print(f"L {L} {name}: {res[name]}", flush=True)
        flash = res[FLASH]
        st = layout_stats(pat, L, causal=True)
        for name, r in res.items():
            mem = "-" if r["peak"] is None else f"{r['peak']:.0f}"
            vs_mem = "-" if r["peak"] is None or not flash["peak"] else f"{r['peak'] / flash['peak']:.2f}x"
            rows.append(f"| {L} | {100 * st['entry_density']:.1f}% | {100 * st['block_density']:.1f}% "
                        f"| {st['blocks_full']} of {st['blocks_kept']} | {name} | {cells[name]} | {r['fwd']:.2f} "
                        f"| {r['bwd']:.2f} | {r['total']:.2f} | {flash['fwd'] / r['fwd']:.2f}x "
                        f"| {flash['total'] / r['total']:.2f}x | {mem} | {vs_mem} |")
        del q, k, v
        if cuda:
            torch.cuda.empty_cache()
        if a.md:  # after every length: a run cut short by a time limit still leaves its rows
            from attnscope.tables import atomic_write_text

            atomic_write_text(a.md, "\n".join(rows) + "\n")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
