"""Benchmark: interventions on every head of one model (`attnscope atlas --interventions`), layer by layer.

The target: SmolLM2-135M, all 270 heads x 3 interventions (sym, anti, ablate) on 4 text windows x 256
tokens + the random probe (4 x 255 tokens), under 10 minutes on 2 cores. Measured here: loading, the clean
pass, and the layer passes of ``--layers`` (all heads of each, one batched forward per window), wall and
CPU seconds (CPU time is what a loaded shared machine cannot inflate). A layer's pass costs its prefix
once and its suffix (the layers after it and the output matrix) once per copy, so its time is linear in
the layer index: the total over every layer is extrapolated from a straight-line fit of the measured
layers' CPU seconds (``--layers all`` measures every layer instead). The floating-point work of the
whole run is counted from the model's shapes, beside the throughput measured.

    OMP_NUM_THREADS=1 python benchmarks/interventions.py smollm2 [--layers 0,10,20,29] [--append docs/benchmarks/atlas.md]
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from _markdown import emit  # benchmarks/: print the section, append it to docs

MODELS = {"smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct", "gemma3-270m": "google/gemma-3-270m",
          "qwen2.5-0.5b": "Qwen/Qwen2.5-Coder-0.5B-Instruct-AWQ"}
KINDS = ("sym", "anti", "ablate")


def _path(name: str) -> str:
    if name not in MODELS:
        return name
    from attnscope.atlas.zoo import _source
    from attnscope.zoo.registry import get_entry

    return _source(get_entry(MODELS[name]))


def flops(subject, n_text: int, length: int, n_random: int, random_length: int, kinds: int) -> float:
    """Multiply-adds x 2 of the whole run: per text window and layer l, the prefix once and (layers after l,
    the output matrix) once per copy; per random window the prefix up to l (matrix products only)."""
    from attnscope.interventions.attention import layer_list

    per_layer = 2 * sum(p.numel() for p in layer_list(subject.model)[0].parameters())  # FLOPs per token and layer
    n_layers, n_heads = subject.n_layers, subject.maps.n_heads
    head = 2 * subject.out_weight.numel() if subject.out_weight is not None else 0
    copies = kinds * n_heads
    total = 0.0
    for layer in range(n_layers):
        text = length * (layer * per_layer + copies * ((n_layers - layer) * per_layer + head))
        rand = random_length * per_layer * (layer + 2 * n_heads)  # the prefix once, the layer per copy (sym, anti)
        total += n_text * text + n_random * rand
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="smollm2, gemma3-270m, qwen2.5-0.5b or a path")
    ap.add_argument("--layers", default="0,10,20,29", help="layers to measure (all heads each), or 'all'")
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--random-windows", type=int, default=4)
    ap.add_argument("--append", help="append the markdown section to this file")
    args = ap.parse_args()

    import numpy as np
    import torch

    from attnscope.heads.maps import make_windows
    from attnscope.heads.probes import default_random_length, random_windows
    from attnscope.interventions.attention import patched
    from attnscope.interventions.run import clean_pass, layer_pass, open_subject

    source = _path(args.model)
    w0, c0 = time.perf_counter(), time.process_time()
    subject = open_subject(source)
    load = (time.perf_counter() - w0, time.process_time() - c0)
    mm = subject.maps
    wins = {"text": make_windows(mm, "builtin", args.windows, args.length)}
    if args.random_windows:
        wins["random"] = random_windows(mm, args.random_windows, default_random_length(mm), seed=0)
    n_layers, n_heads = subject.n_layers, mm.n_heads
    layers = list(range(n_layers)) if args.layers == "all" else [int(x) for x in args.layers.split(",")]
    times: dict[int, tuple[float, float]] = {}
    with torch.inference_mode(), patched(subject.model) as ctl:
        w0, c0 = time.perf_counter(), time.process_time()
        clean = clean_pass(subject, wins, ctl)
        clean_t = (time.perf_counter() - w0, time.process_time() - c0)
        for layer in layers:
            w0, c0 = time.perf_counter(), time.process_time()
            layer_pass(subject, layer, list(range(n_heads)), KINDS, wins, clean, ctl)
            times[layer] = (time.perf_counter() - w0, time.process_time() - c0)
            print(f"layer {layer}: {times[layer][0]:.1f} s wall, {times[layer][1]:.1f} s CPU", flush=True)
    xs = np.array(layers, float)
    cpu = np.array([times[l][1] for l in layers])
    if len(layers) == n_layers:
        total_cpu = float(cpu.sum())
        how = "every layer measured"
    else:
        slope, icpt = np.polyfit(xs, cpu, 1) if len(layers) > 1 else (0.0, float(cpu[0]))
        total_cpu = float(sum(icpt + slope * l for l in range(n_layers)))
        how = f"layers {', '.join(map(str, layers))} measured, the rest from a straight-line fit in the layer index"
    work = flops(subject, args.windows, args.length, args.random_windows,
                 wins["random"].shape[1] if "random" in wins else 0, len(KINDS))
    rate = work / (clean_t[1] + total_cpu) / 1e9
    name = os.path.basename(source)
    lines = [
        f"### Interventions: {name}, {n_layers * n_heads} heads x {len(KINDS)} ({', '.join(KINDS)})",
        "",
        f"`python benchmarks/interventions.py {args.model} --layers {args.layers}`; {args.windows} text windows x "
        f"{args.length} tokens, {args.random_windows} random-probe windows; torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s) (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}), "
        f"{platform.processor() or platform.machine()}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores "
        "at the start of the last layer.",
        "",
        "| stage | wall s | CPU s |",
        "|---|---|---|",
        f"| load (GGUF, dequantised) | {load[0]:.1f} | {load[1]:.1f} |",
        f"| clean pass | {clean_t[0]:.1f} | {clean_t[1]:.1f} |",
        *[f"| layer {l} ({n_heads} heads x {len(KINDS)}) | {times[l][0]:.1f} | {times[l][1]:.1f} |" for l in layers],
        f"| **all {n_layers} layers** ({how}) | | **{total_cpu:.0f}** |",
        "",
        f"Floating-point work of the whole run (matrix products, from the shapes): {work / 1e12:.0f} TFLOP; "
        f"measured throughput {rate:.0f} GFLOP/s per CPU second.",
    ]
    emit("\n".join(lines), args.append)


if __name__ == "__main__":
    main()
