"""Benchmark: the spectra of every head (issue 50) against today's s and d, on a Llama-3-8B-shaped checkpoint.

Generates a Llama-3-8B-shaped checkpoint with random bf16 q/k weights (d = 4096, 32 query heads, 8 kv
heads, d_h = 128, one safetensors shard per layer, as ``benchmarks/geometry_llama8b.py``), reads every
shard once so both passes find the files in the page cache, then in one process, side by side:

* ``s, d``          ``attnscope.geometry.score(dir, levels=...)``: today's scores, streamed from disk;
* ``s, d + spectra`` ``score(dir, levels=..., spectra=True)``: the same plus the spectra of every head's
                    (and layer form's) symmetric and antisymmetric parts, their effective ranks, S's
                    signature and A's top-2 energy.

The passes alternate (A B B A ... for ``--reps`` > 1; the best of each is kept), wall and CPU time of each
(on a machine shared with other jobs the CPU times are the steadier ratio).
Also the kernels alone on one layer in memory (``head_stats`` vs ``head_spectra``, ``layer_stats`` vs
``layer_spectra``), and the factored spectra of one head against the explicit d x d float64 eigenproblem
(``--check-heads``). Writes a markdown section (default: docs/benchmarks/geometry.md).

Every layer of this shape costs the same, so ``--layers 8`` measures the ratio of all 32 at a quarter of
the time (the times for 32 layers are extrapolated, said so in the output).

    nice python benchmarks/geometry_spectra.py --layers 8 --levels both
    nice python benchmarks/geometry_spectra.py --layers 32 --levels head      # every head, no layer forms
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path

from _markdown import emit, unwritable  # benchmarks/: print the section, put it into docs
from geometry_llama8b import D, D_HEAD, N_KV, N_Q, generate

FULL_LAYERS = 32


def _timed(fn):
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t0, time.process_time() - c0, out


def passes(root: Path, levels: tuple[str, ...], reps: int) -> dict:
    """Best wall / CPU seconds of each pass, alternating A B B A ..."""
    from attnscope.geometry import score

    best = {"sd": [float("inf"), float("inf")], "spectra": [float("inf"), float("inf")]}
    order = []
    for r in range(reps):
        order += ["sd", "spectra"] if r % 2 == 0 else ["spectra", "sd"]
    tables = {}
    for kind in order:
        wall, cpu, df = _timed(lambda: score(str(root), levels=levels, spectra=kind == "spectra"))
        best[kind] = [min(best[kind][0], wall), min(best[kind][1], cpu)]
        tables[kind] = df
        print(f"{kind}: {wall:.1f} s wall, {cpu:.1f} s CPU", file=sys.stderr)
    same = tables["sd"][["symmetry", "directionality"]].equals(tables["spectra"][["symmetry", "directionality"]])
    return {"best": best, "n_rows": len(tables["sd"]), "same_sd": bool(same), "table": tables["spectra"]}


def kernels(root: Path) -> dict:
    """Kernel-only seconds of one layer (weights in memory), best of 3."""
    from attnscope.families import get_family
    from attnscope.geometry.kernels import head_stats, layer_stats
    from attnscope.geometry.spectra import head_spectra, layer_spectra
    from attnscope.sources import open_source

    src = open_source(str(root))
    fam = get_family(src.config)
    f = fam.layer_factors(src, fam.stacks(src.config, src)[0], 0)
    out = {}
    for name, fn in (("head_stats", head_stats), ("head_spectra", head_spectra), ("layer_stats", layer_stats),
                     ("layer_spectra", layer_spectra)):
        out[name] = min(_timed(lambda: fn(f.q, f.k))[0] for _ in range(3))
    return {**out, "factors": f}


def check(f, heads: int) -> float:
    """max over ``heads`` heads (at most the 4 of kv head 0) of |factored - explicit| / ||M||_F over both spectra
    (float64 d x d reference)."""
    import numpy as np

    from attnscope.geometry.spectra import explicit_spectra, head_spectra

    heads = min(heads, N_Q // N_KV)  # the query heads of kv head 0
    sp = head_spectra(f.q[:heads], f.k[:1])
    worst = 0.0
    for h in range(heads):
        ref = explicit_spectra(f.q[h].astype(np.float64) @ f.k[0].astype(np.float64).T)
        n = sp.sym.shape[1]
        worst = max(worst, float(np.abs(np.sort(sp.sym[h]) - np.sort(ref.sym[0][:n])).max() / ref.frob[0]),
                    float(np.abs(sp.anti[h] - ref.anti[0][:n]).max() / ref.frob[0]))
    return worst


def markdown(args: argparse.Namespace, res: dict, ker: dict, err: float | None) -> str:
    (sd_w, sd_c), (sp_w, sp_c) = res["best"]["sd"], res["best"]["spectra"]
    scale = FULL_LAYERS / args.layers
    load = os.getloadavg()[0]
    heads = res["table"]
    h = heads[heads["level"] == "head"]
    lv = "+".join(args.levels)
    what = "every head" if args.levels == ("head",) else "every head and layer form" if len(args.levels) == 2 \
        else "every layer form"
    layers = (f"**all {FULL_LAYERS} layers** ({FULL_LAYERS * N_Q} heads)" if args.layers == FULL_LAYERS else
              f"**{args.layers} of its {FULL_LAYERS} layers** (every layer has the same shape and cost; the "
              f"{FULL_LAYERS}-layer times are x{scale:g})")
    target = "target < 2x" if args.levels == ("head",) else "the < 2x target is for the heads (`--levels head`)"
    return f"""## Geometry: spectra of {what} vs today's s and d (benchmarks/geometry_spectra.py)

Llama-3-8B-shaped checkpoint, random bf16 q/k (d = {D}, {N_Q} q heads, {N_KV} kv heads, d_h = {D_HEAD}),
{layers}, one shard per layer, read from the page cache. `score(dir, levels={args.levels})` with and without
`spectra=True`, in one process, passes alternating, best of {args.reps}. Machine: {os.cpu_count()} CPU cores shared
with other jobs (load average {load:.1f} at the end), {platform.machine()}, Python {platform.python_version()}.

| pass ({lv}) | wall | CPU | 32 layers (x{scale:g}) |
|---|---|---|---|
| s, d (today) | {sd_w:.1f} s | {sd_c:.1f} s | {sd_w * scale:.0f} s |
| s, d + spectra | {sp_w:.1f} s | {sp_c:.1f} s | {sp_w * scale:.0f} s |
| **ratio** | **{sp_w / sd_w:.2f}x** | **{sp_c / sd_c:.2f}x** | {target} |

Kernels alone, one layer in memory (best of 3, wall): s, d of the 32 heads {ker['head_stats']:.2f} s, their spectra
{ker['head_spectra']:.2f} s; the layer form's s, d {ker['layer_stats']:.2f} s, its spectra {ker['layer_spectra']:.2f} s
(a 2 x 1024 = 2048-dimensional problem: the layer factors' inner dimension is n_kv d_h = 1024).
The s and d columns of both passes are identical: {res['same_sd']}.
{f"Factored spectra against the explicit {D} x {D} float64 eigenproblem ({args.check_heads} heads): max error {err:.1e} of ||M||_F." if err is not None else ""}
Median over the {len(h)} heads (random weights, so no structure): anti_rank {h['anti_rank'].median():.1f},
sym_rank {h['sym_rank'].median():.1f} of at most {2 * D_HEAD}.
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--levels", default="both", choices=["head", "layer", "both"])
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--check-heads", type=int, default=1, help="heads checked against the explicit route (0: none)")
    ap.add_argument("--dir", type=Path, default=None, help="checkpoint directory (default: a temp dir, deleted)")
    ap.add_argument("--md", default=str(Path(__file__).parents[1] / "docs" / "benchmarks" / "geometry.md"))
    args = ap.parse_args()
    args.levels = ("head", "layer") if args.levels == "both" else (args.levels,)
    why = unwritable(args.md)
    if why:
        sys.exit(f"geometry_spectra.py: {why}")
    tmp = args.dir is None
    root = args.dir or Path(tempfile.mkdtemp(prefix="attnscope_spectra_"))
    try:
        if not (root / "model.safetensors.index.json").is_file():
            generate(root, args.layers)
        for shard in root.glob("*.safetensors"):  # warm the page cache for both passes alike
            shard.read_bytes()
        res = passes(root, args.levels, args.reps)
        ker = kernels(root)
        err = check(ker["factors"], args.check_heads) if args.check_heads else None
        emit(markdown(args, res, ker, err), args.md)
    finally:
        if tmp:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
