"""Benchmark: attnscope's factored per-head scoring vs the explicit d x d method, on a Llama-3-8B shape.

Generates a Llama-3-8B-shaped checkpoint with random bf16 q/k weights only (d = 4096, 32 query
heads, 8 kv heads, d_h = 128; one safetensors shard per layer plus an index, as on the hub), then in
separate processes (so each peak RSS is its own, read from ru_maxrss):

* ours:     ``attnscope.geometry.score(dir)`` over all layers, heads and layer forms, streamed from
            disk; plus the compute-only time of the factored per-head kernel on the subset layers;
* explicit: the paper's approach on a subset of heads: materialise M_h = W_q W_k^T (4096 x 4096,
            float32 BLAS) and take s and d from it (float64 reductions); time per head extrapolated.

It prints time per head for both, the speed-up, peak RSS, and the max |difference| of s and d on the
shared heads, and writes a markdown section (default docs/benchmarks/geometry.md).

    nice python benchmarks/geometry_llama8b.py                  # 32 layers, 8 explicit heads
    nice python benchmarks/geometry_llama8b.py --layers 4 --explicit-heads 4   # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

D, N_Q, N_KV, D_HEAD = 4096, 32, 8, 128


def generate(root: Path, n_layers: int, seed: int = 0) -> Path:
    """Write config.json, one bf16 shard per layer (q_proj, k_proj) and model.safetensors.index.json."""
    import torch
    from safetensors.torch import save_file

    root.mkdir(parents=True, exist_ok=True)
    gen = torch.Generator().manual_seed(seed)
    weight_map = {}
    for i in range(n_layers):
        shard = f"model-{i + 1:05d}-of-{n_layers:05d}.safetensors"
        q = (0.02 * torch.randn(N_Q * D_HEAD, D, generator=gen)).to(torch.bfloat16)
        k = (0.02 * torch.randn(N_KV * D_HEAD, D, generator=gen)).to(torch.bfloat16)
        names = {f"model.layers.{i}.self_attn.q_proj.weight": q, f"model.layers.{i}.self_attn.k_proj.weight": k}
        save_file(names, str(root / shard), metadata={"format": "pt"})
        weight_map.update({n: shard for n in names})
    (root / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    config = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": D,
        "num_attention_heads": N_Q, "num_key_value_heads": N_KV, "head_dim": D_HEAD,
        "num_hidden_layers": n_layers, "intermediate_size": 14336, "vocab_size": 128256,
    }  # fmt: skip
    (root / "config.json").write_text(json.dumps(config, indent=1))
    return root


def subset(n_layers: int, n_heads: int) -> list[tuple[int, int]]:
    """(layer, head) pairs for the explicit baseline: first and last layer, heads spread over groups."""
    layers = sorted({0, n_layers - 1})
    per = max(1, n_heads // len(layers))
    heads = [round(j * (N_Q - 1) / max(per - 1, 1)) for j in range(per)]
    return [(li, h) for li in layers for h in heads][:n_heads]


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def worker_ours(root: Path, pairs: list[tuple[int, int]]) -> dict:
    from attnscope.families import get_family
    from attnscope.geometry import score
    from attnscope.geometry.kernels import head_stats
    from attnscope.sources import open_source

    t0 = time.perf_counter()
    df = score(str(root), levels=("head",))  # per-head scores, streamed from disk
    total = time.perf_counter() - t0
    t0 = time.perf_counter()
    n_layer_rows = len(score(str(root), levels=("layer",)))  # the per-layer forms M_L, another pass
    layers_s = time.perf_counter() - t0
    n_heads = int((df["level"] == "head").sum())
    rss = _peak_rss_mb()
    heads = df[df["level"] == "head"].set_index(["layer", "head"])
    values = {f"{li},{h}": [float(heads.loc[(li, h), "symmetry"]), float(heads.loc[(li, h), "directionality"])]
              for li, h in pairs}  # fmt: skip
    # compute-only: the factored kernel on the subset layers (weights already in memory)
    src = open_source(str(root))
    fam = get_family(src.config)
    info = fam.stacks(src.config, src)[0]
    kernel_times = []
    for li in sorted({li for li, _ in pairs}):
        f = fam.layer_factors(src, info, li)
        t1 = time.perf_counter()
        st = head_stats(f.q, f.k)
        st.directionality(2.0)
        kernel_times.append((time.perf_counter() - t1) / f.n_heads)
    return {"total_s": total, "n_heads": n_heads, "per_head_s": total / n_heads, "layers_s": layers_s,
            "n_layers": n_layer_rows,
            "kernel_per_head_s": min(kernel_times), "peak_rss_mb": rss, "values": values}  # fmt: skip


def paper_style_scores(m) -> tuple[float, float]:
    """The paper's route written as plainly as its description: the symmetric part of the explicit
    M, S_raw = ||M_s||^2 / ||M||^2 (s = 2 S_raw - 1), and d from row/column norms of M."""
    import numpy as np

    m_s = 0.5 * (m + m.T)
    s_raw = np.linalg.norm(m_s) ** 2 / np.linalg.norm(m) ** 2
    r, c = np.linalg.norm(m, axis=1), np.linalg.norm(m, axis=0)
    tr, tc = r.mean() + 2 * r.std(ddof=1), c.mean() + 2 * c.std(ddof=1)
    big_r, big_c = (r[r > tr] - tr).sum(), (c[c > tc] - tc).sum()
    return float(2 * s_raw - 1), float((big_r - big_c) / (big_r + big_c)) if big_r + big_c > 0 else 0.0


def worker_explicit(root: Path, pairs: list[tuple[int, int]]) -> dict:
    import numpy as np

    from attnscope.families import get_family
    from attnscope.geometry.kernels import explicit_stats
    from attnscope.sources import open_source

    src = open_source(str(root))
    fam = get_family(src.config)
    info = fam.stacks(src.config, src)[0]
    values, times, naive_times, naive_diff = {}, [], [], 0.0
    for li in sorted({li for li, _ in pairs}):
        f = fam.layer_factors(src, info, li)
        q, k = np.ascontiguousarray(f.q), np.ascontiguousarray(f.k)
        for _, h in [p for p in pairs if p[0] == li]:
            t1 = time.perf_counter()
            m = q[h] @ k[f.kv_index[h]].T  # [d, d] float32, 64 MiB
            st = explicit_stats(m)
            d, _, _ = st.directionality(2.0)
            times.append(time.perf_counter() - t1)
            values[f"{li},{h}"] = [float(st.symmetry[0]), float(d[0])]
            t1 = time.perf_counter()
            m = q[h] @ k[f.kv_index[h]].T
            s_n, d_n = paper_style_scores(m)
            naive_times.append(time.perf_counter() - t1)
            naive_diff = max(naive_diff, abs(s_n - values[f"{li},{h}"][0]), abs(d_n - values[f"{li},{h}"][1]))
            del m, st
    return {"per_head_s": float(np.median(times)), "n_heads": len(times), "peak_rss_mb": _peak_rss_mb(),
            "naive_per_head_s": float(np.median(naive_times)), "naive_max_diff": naive_diff,
            "values": values}  # fmt: skip


def run_worker(kind: str, root: Path, pairs: list[tuple[int, int]]) -> dict:
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as fh:
        out = Path(fh.name)
    cmd = [sys.executable, __file__, "--worker", kind, "--dir", str(root), "--pairs", json.dumps(pairs), "--result", str(out)]
    subprocess.run(cmd, check=True)
    res = json.loads(out.read_text())
    out.unlink()
    return res


def markdown(args: argparse.Namespace, ours: dict, expl: dict, diff_s: float, diff_d: float) -> str:
    speedup = expl["per_head_s"] / ours["per_head_s"]
    kspeed = expl["per_head_s"] / ours["kernel_per_head_s"]
    nspeed = expl["naive_per_head_s"] / ours["per_head_s"]
    nkspeed = expl["naive_per_head_s"] / ours["kernel_per_head_s"]
    load = os.getloadavg()[0]
    return f"""## Geometry: factored W_qk scoring vs explicit d x d (benchmarks/geometry_llama8b.py)

Llama-3-8B-shaped checkpoint, random bf16 q/k weights (d = {D}, {N_Q} q heads, {N_KV} kv heads,
d_h = {D_HEAD}), **{args.layers} layers** in {args.layers} safetensors shards, streamed from disk.
Machine: {os.cpu_count()} CPU cores shared with other jobs (load average {load:.1f} at the end),
{platform.machine()}, Python {platform.python_version()}. Explicit baseline: {expl['n_heads']} heads
(first and last layer), each M_h = W_q W_k^T materialised as {D} x {D} float32, s and d from it;
its time per head is the median, extrapolated to all heads.

| method | time per head | all {ours['n_heads']} heads | peak RSS |
|---|---|---|---|
| attnscope `score(levels=("head",))`: factored, streamed (reads bf16 shards, upcasts, checks finiteness) | {ours['per_head_s'] * 1e3:.1f} ms | {ours['total_s']:.1f} s | {ours['peak_rss_mb']:.0f} MB |
| attnscope factored kernel only (weights in memory) | {ours['kernel_per_head_s'] * 1e3:.1f} ms | {ours['kernel_per_head_s'] * ours['n_heads']:.1f} s (est.) | - |
| explicit d x d per head, written as the paper describes it (M, its symmetric part, norms; compute only) | {expl['naive_per_head_s'] * 1e3:.0f} ms | {expl['naive_per_head_s'] * ours['n_heads']:.0f} s (est.) | {expl['peak_rss_mb']:.0f} MB |
| explicit d x d per head, tiled and copy-free (attnscope's own explicit route; a strong baseline) | {expl['per_head_s'] * 1e3:.0f} ms | {expl['per_head_s'] * ours['n_heads']:.0f} s (est.) | (same process) |

The {ours['n_layers']} per-layer forms M_L (`levels=("layer",)`, a separate streamed pass; for this shape r = n_kv d_h =
d/4, so each is one explicit d x d product) took {ours['layers_s']:.1f} s ({ours['layers_s'] / max(ours['n_layers'], 1):.2f} s per layer).

* Speed-up per head against the paper-style explicit method: **{nspeed:.0f}x** end to end from disk
  (ours reads and upcasts the weights, the baseline's time is compute only), **{nkspeed:.0f}x** kernel
  against compute. Target >= 30x.
* Against the strong tiled explicit route: **{speedup:.0f}x** end to end, **{kspeed:.0f}x** kernel against
  kernel (the factored kernel does ~4 d e^2 flops per head against 2 d^2 e + d^2 reductions: at d/e = 32
  the flop ratio alone is ~8-16x, so this comparison cannot reach 30x on any machine).
* The paper-style and tiled explicit scores agree to {expl['naive_max_diff']:.1e}.
* Agreement on the {expl['n_heads']} shared heads: max |delta s| = {diff_s:.1e}, max |delta d| = {diff_d:.1e} (target 1e-5).
* Peak RSS of the streamed {args.layers}-layer run: {ours['peak_rss_mb']:.0f} MB (target < 1.5 GB; includes
  the Python, torch and pandas runtime).
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=32)
    ap.add_argument("--explicit-heads", type=int, default=8)
    ap.add_argument("--dir", type=Path, default=None, help="checkpoint directory (default: a temp dir, deleted)")
    ap.add_argument("--keep", action="store_true", help="keep the generated checkpoint")
    ap.add_argument("--md", type=Path, default=Path(__file__).parents[1] / "docs" / "benchmarks" / "geometry.md")
    ap.add_argument("--worker", choices=["ours", "explicit"], help=argparse.SUPPRESS)
    ap.add_argument("--pairs", help=argparse.SUPPRESS)
    ap.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker:
        pairs = [tuple(p) for p in json.loads(args.pairs)]
        fn = worker_ours if args.worker == "ours" else worker_explicit
        args.result.write_text(json.dumps(fn(args.dir, pairs)))
        return

    tmp = args.dir is None
    root = args.dir or Path(tempfile.mkdtemp(prefix="attnscope_llama8b_"))
    try:
        if not (root / "model.safetensors.index.json").is_file():
            t0 = time.perf_counter()
            generate(root, args.layers)
            print(f"generated {args.layers} layers in {time.perf_counter() - t0:.1f} s at {root}", file=sys.stderr)
        pairs = subset(args.layers, args.explicit_heads)
        ours = run_worker("ours", root, pairs)
        print(f"ours: {ours['total_s']:.1f} s for {ours['n_heads']} heads, peak RSS {ours['peak_rss_mb']:.0f} MB", file=sys.stderr)
        expl = run_worker("explicit", root, pairs)
        print(f"explicit: {expl['per_head_s']:.3f} s per head, peak RSS {expl['peak_rss_mb']:.0f} MB", file=sys.stderr)
        diff_s = max(abs(ours["values"][k][0] - v[0]) for k, v in expl["values"].items())
        diff_d = max(abs(ours["values"][k][1] - v[1]) for k, v in expl["values"].items())
        md = markdown(args, ours, expl, diff_s, diff_d)
        print(md)
        from attnscope.tables import atomic_write_text

        atomic_write_text(args.md, md)
    finally:
        if tmp and not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
