"""Benchmark: the sparse layout's block density, the sparse kernel vs dense attention, and head-metric extraction.

Part L -- block layout (no timing, computed from the pattern): for each pattern and length, the share of
kept entries, the share of 128 x 128 blocks FlexAttention computes over the packed key layout
(:mod:`attnscope.sparse.layout`, exactly the blocks its BlockMask holds) and over the sequence's own
order, the blocks skipped, and the target (block density <= 2 x entry density + the bands' own blocks).

Part A -- forward+backward of ONE attention layer (b=1, h=8, e=64, float32) at length L with the
``byte-sparse-8h`` pattern: ``attnscope.sparse.sparse_attention`` (gathered band + shared keys) vs
``F.scaled_dot_product_attention`` with the dense boolean mask (the same function), side by side;
plus plain causal SDPA (no pattern, flash kernel) for scale. Time = best of ``--repeats``.
Peak memory = growth of the process's peak RSS during the call, each variant in a fresh subprocess.

Part M -- memory at long context: one fwd+bwd at ``--memory-length`` (b 4, h 8, e 64, float32), the
gathered kernel vs flash causal SDPA, each in a fresh subprocess with glibc's mmap threshold fixed at
64 KiB (``MALLOC_MMAP_THRESHOLD_``), so freed tensors return to the OS and the RSS peak is the
allocator's peak; dense masked SDPA's score matrix alone (b h L^2 float32) is given as computed bytes.

Part B -- head metrics of a random-init attnscope byte model (4 layers x 8 heads, d 128) on
``--windows`` windows of ``--metrics-length`` bytes: streamed (``attn_callback``, one layer's maps at
a time; what ``attnscope heads`` does) vs naive (``return_attn=True``: all layers' maps held, then
measured). Windows/s and peak RSS growth, each in a fresh subprocess.

    python benchmarks/sparse_attention.py [--parts layout,attention,memory,metrics] [--length 4096]
        [--layout-length 4096 --layout-length 16384] [--memory-length 16384] [--repeats 3] [--md FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

from _markdown import emit  # benchmarks/: print the section, append it to docs


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _current_rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def worker_attention(variant: str, L: int, repeats: int) -> dict:
    import torch
    import torch.nn.functional as F

    from attnscope.sparse import dense_mask
    from attnscope.sparse.attention import sparse_attention

    torch.manual_seed(0)
    q, k, v = [torch.randn(1, 8, L, 64, requires_grad=True) for _ in range(3)]
    mask = dense_mask("byte-sparse-8h", L, causal=True)
    fns = {
        "sparse": lambda: sparse_attention(q, k, v, "byte-sparse-8h", causal=True, impl="gather"),
        "dense_masked": lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        "dense_causal": lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    }
    fn = fns[variant]
    base = _current_rss_mb()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        out.backward(torch.ones_like(out))
        times.append(time.perf_counter() - t0)
        q.grad = k.grad = v.grad = None
        del out
    return {"variant": variant, "seconds": min(times), "peak_rss_growth_mb": _rss_mb() - base,
            "kept_entries": int(mask.sum()) if variant != "dense_causal" else 8 * L * (L + 1) // 2}


def worker_memory(variant: str, L: int, batch: int) -> dict:
    import torch
    import torch.nn.functional as F

    from attnscope.sparse.attention import sparse_attention

    torch.set_num_threads(1)
    torch.manual_seed(0)
    q, k, v = [torch.randn(batch, 8, L, 64, requires_grad=True) for _ in range(3)]
    g = torch.randn(batch, 8, L, 64)
    base = _rss_mb()
    t0 = time.process_time()
    if variant == "gathered":
        out = sparse_attention(q, k, v, "byte-sparse-8h", causal=True, impl="gather")
    else:
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    out.backward(g)
    return {"variant": variant, "cpu_seconds": time.process_time() - t0, "peak_rss_growth_mb": _rss_mb() - base,
            "inputs_mb": 3 * q.numel() * 4 / 2**20}


def _patterns() -> dict:
    """The patterns of the layout table: presets, a pattern as `attnscope heads derive` writes it, a user's
    YAML with random key positions, and a head whose shared keys are too many to pack."""
    import numpy as np

    from attnscope.sparse import HeadPattern, Pattern, load_pattern

    rng = np.random.default_rng(0)
    derived = Pattern(tuple([HeadPattern(window=8, positions=(0,)), HeadPattern(window=16),
                             HeadPattern(stride=16, positions=(0,)), HeadPattern(window=128, stride=8)] * 2),
                      name="derived (heads derive style)")
    random_keys = Pattern(tuple(HeadPattern(window=16, positions=tuple(int(p) for p in rng.choice(4096, 200, replace=False)))
                                for _ in range(8)), name="user YAML: local(16) + 200 random keys below 4096")
    return {
        "byte-sparse-8h": load_pattern("byte-sparse-8h"),
        "local:32": load_pattern("local:32", n_heads=8),
        "strided:32:8": load_pattern("strided:32:8", n_heads=8),
        "strided:64:16": load_pattern("strided:64:16", n_heads=8),
        "strided:16:2": load_pattern("strided:16:2", n_heads=8),
        "dense": load_pattern("dense", n_heads=8),
        derived.name: derived,
        random_keys.name: random_keys,
    }


def layout_table(lengths: list[int]) -> list[str]:
    from attnscope.sparse.layout import layout_stats

    rows = ["| pattern | L | entry density | block density (packed layout) | sequence order | blocks skipped | "
            "target: 2 x entry + bands | met |", "|---|---|---|---|---|---|---|---|"]
    for name, pat in _patterns().items():
        for L in lengths:
            s = layout_stats(pat, L, causal=True)
            target = 2 * s["entry_density"] + s["band_block_density"]
            rows.append(f"| {name} | {L} | {100 * s['entry_density']:.1f}% | {100 * s['block_density']:.1f}% | "
                        f"{100 * s['inplace_block_density']:.1f}% | {100 * s['blocks_skipped']:.1f}% "
                        f"({s['dense_blocks'] - s['blocks_kept']:,} of {s['dense_blocks']:,}) | "
                        f"{100 * min(target, 1):.1f}% | {'yes' if s['block_density'] <= target + 1e-12 else 'NO'} |")
    return rows


def worker_metrics(variant: str, L: int, windows: int) -> dict:
    import torch

    from attnscope.heads.metrics import window_metrics
    from attnscope.training.model import ModelConfig, Transformer

    torch.manual_seed(0)
    cfg = ModelConfig(n_layers=4, n_heads=8, d_model=128, d_ff=512, vocab_size=256, max_seq_len=L, causal=True,
                      norm="pre", dropout=0.0)
    model = Transformer(cfg).eval()
    idx = torch.randint(0, 256, (windows, L))
    base = _current_rss_mb()
    t0 = time.perf_counter()
    with torch.inference_mode():
        for w in range(windows):
            x = idx[w : w + 1]
            if variant == "streamed":
                model(x, attn_callback=lambda layer, p: window_metrics(p, True, token_ids=x))
            else:
                _, maps = model(x, return_attn=True)
                for p in maps:
                    window_metrics(p, True, token_ids=x)
                del maps
    dt = time.perf_counter() - t0
    return {"variant": variant, "windows_per_second": windows / dt, "peak_rss_growth_mb": _rss_mb() - base}


def _spawn(kind: str, variant: str, *args, env: dict | None = None) -> dict:
    cmd = [sys.executable, __file__, "--worker", kind, variant, *map(str, args)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, env={**os.environ, **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--parts", default="layout,attention,memory,metrics",
                    help="comma-separated: layout, attention, memory, metrics")
    ap.add_argument("--length", type=int, default=4096)
    ap.add_argument("--layout-length", type=int, action="append", default=None)
    ap.add_argument("--memory-length", type=int, default=16384)
    ap.add_argument("--memory-batch", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--metrics-length", type=int, default=1024)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--md", default=None, help="Append the results as a markdown section to this file.")
    ap.add_argument("--worker", nargs="+", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        kind, variant, *rest = a.worker
        workers = {"attn": worker_attention, "metrics": worker_metrics, "memory": worker_memory}
        print(json.dumps(workers[kind](variant, int(rest[0]), int(rest[1]))))
        return

    from attnscope.sparse import load_pattern

    parts = set(a.parts.split(","))
    unknown = parts - {"layout", "attention", "memory", "metrics"}
    if unknown:
        ap.error(f"unknown --parts {sorted(unknown)}")
    L = a.length
    everything = parts == {"layout", "attention", "memory", "metrics"}
    lines = [
        "## Head anatomy and sparse attention (`benchmarks/sparse_attention.py`)" if everything else
        f"### Sparse attention: {', '.join(p for p in ('layout', 'attention', 'memory', 'metrics') if p in parts)} "
        "(`benchmarks/sparse_attention.py`)",
        "",
        f"Machine: shared 2-core CPU (load from other jobs during the run), torch CPU, float32. "
        f"Command: `python benchmarks/sparse_attention.py --parts {a.parts} --length {L} --repeats {a.repeats} "
        f"--memory-length {a.memory_length} --metrics-length {a.metrics_length} --windows {a.windows}`.",
        "",
    ]
    if "layout" in parts:
        lengths = a.layout_length or [4096, 16384]
        lines += [
            "**Block layout** (causal; 128 x 128 blocks over dense causal attention's blocks; computed from the "
            "pattern, the blocks FlexAttention's BlockMask holds; 'sequence order' = the shared keys left at "
            "their own positions):",
            "",
            *layout_table(lengths),
            "",
        ]
    if "attention" in parts:
        density = load_pattern("byte-sparse-8h").density(L, causal=True)
        attn = {v: _spawn("attn", v, L, a.repeats) for v in ("sparse", "dense_masked", "dense_causal")}
        s, d, c = attn["sparse"], attn["dense_masked"], attn["dense_causal"]
        lines += [
            f"**One attention layer, forward+backward, L = {L}, 8 heads, e = 64, `byte-sparse-8h` pattern** "
            f"({100 * density:.1f}% of the causal entries kept; best of {a.repeats}; memory = peak-RSS growth in a fresh process)",
            "",
            "| implementation | time (s) | peak memory growth (MB) | kept entries |",
            "|---|---|---|---|",
            f"| attnscope sparse_attention (gathered) | {s['seconds']:.3f} | {s['peak_rss_growth_mb']:.0f} | {s['kept_entries']:,} |",
            f"| dense masked SDPA (same function) | {d['seconds']:.3f} | {d['peak_rss_growth_mb']:.0f} | {8 * L * L:,} (all L^2 scored) |",
            f"| dense causal SDPA (no pattern, flash; for scale) | {c['seconds']:.3f} | {c['peak_rss_growth_mb']:.0f} | {c['kept_entries']:,} |",
            "",
            f"Speed-up vs dense masked SDPA: **{d['seconds'] / s['seconds']:.1f}x**; memory ratio "
            f"{d['peak_rss_growth_mb'] / max(s['peak_rss_growth_mb'], 1e-9):.1f}x less. "
            f"vs causal flash SDPA without any pattern: {c['seconds'] / s['seconds']:.2f}x.",
            "",
        ]
    if "memory" in parts:
        Lm, bm = a.memory_length, a.memory_batch
        fixed = {"MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
        mem = {v: _spawn("memory", v, Lm, bm, env=fixed) for v in ("gathered", "flash")}
        scores_mb = bm * 8 * Lm * Lm * 4 / 2**20
        g, f = mem["gathered"], mem["flash"]
        lines += [
            f"**Memory at L = {Lm}**, one forward+backward, b = {bm}, h = 8, e = 64, float32, one thread "
            f"(peak RSS growth over the inputs, allocator's peak: mmap threshold fixed at 64 KiB; inputs "
            f"q, k, v {g['inputs_mb']:.0f} MB; output, its gradient and the three input gradients are in the growth):",
            "",
            "| implementation | peak memory growth (MB) | CPU time (s) |",
            "|---|---|---|",
            f"| attnscope gathered (byte-sparse-8h) | {g['peak_rss_growth_mb']:.0f} | {g['cpu_seconds']:.1f} |",
            f"| flash causal SDPA (no pattern) | {f['peak_rss_growth_mb']:.0f} | {f['cpu_seconds']:.1f} |",
            f"| dense masked SDPA (same function as gathered) | not run: its score matrix alone is {scores_mb:,.0f} MB | - |",
            "",
        ]
    if "metrics" in parts:
        met = {v: _spawn("metrics", v, a.metrics_length, a.windows) for v in ("streamed", "naive")}
        lines += [
            f"**Head-metric extraction**, random-init byte decoder (4 layers x 8 heads, d 128), {a.windows} windows x "
            f"{a.metrics_length} bytes, all metrics:",
            "",
            "| path | windows/s | peak memory growth (MB) |",
            "|---|---|---|",
            f"| streamed (attn_callback, one layer at a time) | {met['streamed']['windows_per_second']:.2f} | {met['streamed']['peak_rss_growth_mb']:.0f} |",
            f"| naive (return_attn: all layers' maps, then metrics) | {met['naive']['windows_per_second']:.2f} | {met['naive']['peak_rss_growth_mb']:.0f} |",
            "",
        ]
    emit("\n".join(lines), a.md)


if __name__ == "__main__":
    main()
