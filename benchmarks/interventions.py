"""Benchmark: interventions on every head of one model (`attnscope atlas --interventions`), layer by layer.

The target: SmolLM2-135M, all 270 heads x 3 interventions (sym, anti, ablate) on 4 text windows x 256
tokens + the random probe (4 x 255 tokens), under 10 minutes on 2 cores. Measured here, in one run for
each ``--precision`` side by side (default: ``full``, every product in float32, the baseline, and
``bf16-delta``, the copies' differences multiplied in bfloat16): loading, the clean pass, and the layer
passes of ``--layers`` (all heads of each, one batched forward per window), wall and CPU seconds (CPU time
is what a loaded shared machine cannot inflate), and how far the two precisions' results are apart
(per row, relative to the row's own 95% interval). A layer's pass costs its prefix
once and its suffix (the layers after it and the output matrix) once per copy, so its time is linear in
the layer index: the total over every layer is extrapolated from a straight-line fit of the measured
layers' CPU seconds (``--layers all`` measures every layer instead). The floating-point work of the
whole run is counted from the model's shapes, beside the throughput measured.

    OMP_NUM_THREADS=1 python benchmarks/interventions.py smollm2 [--layers 0,10,20,29] [--precision full,bf16-delta]
        [--append docs/benchmarks/atlas.md]
    python benchmarks/interventions.py smollm2 --layers 14,15,16,17 --precision bf16-delta --workers 2
"""

from __future__ import annotations

import argparse
import os
import platform
import time

from _markdown import emit  # benchmarks/: print the section, append it to docs

MODELS = {"smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct", "gemma3-270m": "google/gemma-3-270m",
          "qwen2.5-0.5b": "Qwen/Qwen2.5-Coder-0.5B-Instruct-AWQ"}
#: SmolLM2-135M's shape with random weights (a GPU machine without the 98 MB file; the time does not depend on them)
RANDOM = {"random-smollm2": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                                 num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192,
                                 rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)}
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


def _extrapolate(layers: list[int], cpu: list[float], n_layers: int) -> tuple[float, str]:
    """CPU seconds of every layer: measured, or a straight-line fit in the layer index."""
    import numpy as np

    if len(layers) == n_layers:
        return float(sum(cpu)), "every layer measured"
    slope, icpt = np.polyfit(np.array(layers, float), np.array(cpu), 1) if len(layers) > 1 else (0.0, cpu[0])
    return float(sum(icpt + slope * l for l in range(n_layers))), (
        f"layers {', '.join(map(str, layers))} measured, the rest from a straight-line fit in the layer index")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="smollm2, gemma3-270m, qwen2.5-0.5b, a path, or random-smollm2 (with --tokenizer)")
    ap.add_argument("--tokenizer", help="random-smollm2: a tokenizer directory (its vocabulary within 49152)")
    ap.add_argument("--device", default="cpu", help="cpu or cuda (on cuda the times are wall seconds)")
    ap.add_argument("--layers", default="0,10,20,29", help="layers to measure (all heads each), or 'all'")
    ap.add_argument("--precision", default="full,bf16-delta", help="precisions to time side by side (the first is the baseline)")
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--random-windows", type=int, default=4)
    ap.add_argument("--append", help="append the markdown section to this file")
    ap.add_argument("--workers", type=int, default=0,
                    help="instead: --layers in one process of N threads against N forked one-thread workers (wall "
                         "seconds, side by side in one run; the last --precision)")
    args = ap.parse_args()
    if args.model in RANDOM and not args.tokenizer:
        ap.error(f"{args.model} needs --tokenizer DIR")

    import torch

    from attnscope.heads.maps import make_windows
    from attnscope.heads.probes import default_random_length, random_windows
    from attnscope.interventions.attention import patched
    from attnscope.interventions.deltas import LowWeights, resolve_precision
    from attnscope.interventions.run import clean_pass, layer_pass, open_subject
    from attnscope.interventions.summary import summarise

    precisions = [resolve_precision(p.strip(), args.device) for p in args.precision.split(",")]
    w0, c0 = time.perf_counter(), time.process_time()
    if args.model in RANDOM:
        from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

        torch.manual_seed(0)
        model = LlamaForCausalLM(LlamaConfig(**RANDOM[args.model], attn_implementation="eager")).eval()
        source = args.model
        subject = open_subject(model.to(args.device), tokenizer=AutoTokenizer.from_pretrained(args.tokenizer),
                               name=args.model)
    else:
        source = _path(args.model)
        subject = open_subject(source, device=args.device)
    load = (time.perf_counter() - w0, time.process_time() - c0)
    cuda = args.device.startswith("cuda")
    which = 0 if cuda else 1  # the clock reported: wall on a GPU, CPU seconds on a CPU
    mm = subject.maps
    wins = {"text": make_windows(mm, "builtin", args.windows, args.length)}
    if args.random_windows:
        wins["random"] = random_windows(mm, args.random_windows, default_random_length(mm), seed=0)
    n_layers, n_heads = subject.n_layers, mm.n_heads
    layers = list(range(n_layers)) if args.layers == "all" else [int(x) for x in args.layers.split(",")]
    times: dict[tuple[str, int], tuple[float, float]] = {}
    tables: dict[str, list] = {p: [] for p in precisions}
    from attnscope.interventions.attention import layer_list

    prepared = LowWeights().prepare(layer_list(subject.model).modules(), subject.out_weight)  # as intervene() does
    with torch.inference_mode(), patched(subject.model) as ctl:
        w0, c0 = time.perf_counter(), time.process_time()
        clean = clean_pass(subject, wins, ctl, for_deltas="bf16-delta" in precisions)
        clean_t = (time.perf_counter() - w0, time.process_time() - c0)
        if args.workers:
            return compare_workers(args, subject, wins, clean, ctl, prepared if precisions[-1] == "bf16-delta"
                                   else None, layers)
        for layer in layers:
            for prec in precisions:  # side by side, layer by layer: the same machine state for both
                low = prepared if prec == "bf16-delta" else None
                w0, c0 = time.perf_counter(), time.process_time()
                raw = layer_pass(subject, layer, list(range(n_heads)), KINDS, wins, clean, ctl, low)
                times[prec, layer] = (time.perf_counter() - w0, time.process_time() - c0)
                tables[prec].append(summarise(raw))
                print(f"layer {layer} {prec}: {times[prec, layer][0]:.1f} s wall, {times[prec, layer][1]:.1f} s CPU",
                      flush=True)
    work = flops(subject, args.windows, args.length, args.random_windows,
                 wins["random"].shape[1] if "random" in wins else 0, len(KINDS))
    totals = {p: _extrapolate(layers, [times[p, l][which] for l in layers], n_layers) for p in precisions}
    base = precisions[0]
    name = os.path.basename(source)
    rows = []
    for prec in precisions:
        total, how = totals[prec]
        rows.append(f"| {prec}: all {n_layers} layers ({how}) | {f'**{total:.1f}**' if cuda else ''} | "
                    f"{'' if cuda else f'**{total:.0f}**'} | {work / (clean_t[which] + total) / 1e9:.0f} | "
                    f"{totals[base][0] / total:.2f}x |")
    agree = ""
    if len(precisions) > 1:
        import pandas as pd

        key = ["layer", "head", "intervention", "measure"]
        a = pd.concat(tables[base]).set_index(key).sort_index()
        half = (a["ci_high"] - a["ci_low"]) / 2
        for prec in precisions[1:]:
            b = pd.concat(tables[prec]).set_index(key).sort_index()
            err = (a["delta"] - b["delta"]).abs()
            loss = a.index.get_level_values("measure") == "loss"
            agree += (f"{prec} against {base}, the measured layers' {int(loss.sum())} loss rows: largest |delta "
                      f"difference| {err[loss].max():.2e} nats (median {err[loss].median():.1e}), at most "
                      f"{(err[loss] / half[loss]).max():.2%} of the row's 95% interval half-width; behaviour rows: "
                      f"largest difference {err[~loss].max():.1e}. ")
    lines = [
        f"### Interventions: {name}, {n_layers * n_heads} heads x {len(KINDS)} ({', '.join(KINDS)})",
        "",
        f"`python benchmarks/interventions.py {args.model} --layers {args.layers} --precision {','.join(precisions)}"
        f"{' --tokenizer DIR' if args.model in RANDOM else ''}{'' if args.device == 'cpu' else ' --device ' + args.device}`; "
        f"{args.windows} text windows x {args.length} tokens, {args.random_windows} random-probe windows; torch "
        f"{torch.__version__}, " + (f"{torch.cuda.get_device_name()} (times: wall seconds, the GPU's)" if cuda else
        f"{torch.get_num_threads()} thread(s) (OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}), "
        f"{platform.processor() or platform.machine()}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
        "cores at the end (times: CPU seconds, which a loaded machine does not inflate)") + ".",
        "",
        "| stage | wall s | CPU s | GFLOP/s | time, baseline / this |",
        "|---|---|---|---|---|",
        f"| load ({'random weights' if args.model in RANDOM else 'the file'}) | {load[0]:.1f} | {load[1]:.1f} | | |",
        f"| clean pass | {clean_t[0]:.1f} | {clean_t[1]:.1f} | | |",
        *[f"| layer {l}, {p} ({n_heads} heads x {len(KINDS)}) | {times[p, l][0]:.2f} | {times[p, l][1]:.1f} | | "
          f"{times[base, l][which] / times[p, l][which]:.2f}x |" for l in layers for p in precisions],
        *rows,
        "",
        f"Floating-point work of the whole run (matrix products, from the shapes, counted as float32 products): "
        f"{work / 1e12:.0f} TFLOP. {agree}",
    ]
    emit("\n".join(lines), args.append)


def compare_workers(args, subject, wins, clean, ctl, low, layers: list[int]) -> None:
    """Wall time of the layer passes of ``layers``: one process of ``args.workers`` threads, in order, against
    that many forked workers of one thread each (attnscope.interventions.workers), after one warm-up pass."""
    import torch

    from attnscope.heap import reused_heap
    from attnscope.interventions.run import layer_pass
    from attnscope.interventions.workers import run_layers

    n = args.workers
    heads = list(range(subject.maps.n_heads))
    precision = "bf16-delta" if low is not None else "full"
    torch.set_num_threads(n)
    with reused_heap():
        layer_pass(subject, layers[0], heads, KINDS, wins, clean, ctl, low)  # warm-up: the heap, the weights
        w0 = time.perf_counter()
        for layer in layers:
            layer_pass(subject, layer, heads, KINDS, wins, clean, ctl, low)
        one = time.perf_counter() - w0
        w0 = time.perf_counter()
        run_layers(layers, lambda l: layer_pass(subject, l, heads, KINDS, wins, clean, ctl, low), n)
        forked = time.perf_counter() - w0
    lines = [
        f"### Interventions: one process of {n} threads against {n} one-thread workers",
        "",
        f"`python benchmarks/interventions.py {args.model} --layers {args.layers} --precision {precision} "
        f"--workers {n}`; {args.windows} text windows x {args.length} tokens, {args.random_windows} random-probe "
        f"windows; torch {torch.__version__}, {platform.processor() or platform.machine()}, load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end (wall seconds; the workers' time includes "
        "their forks and each one's first pass on a cold heap).",
        "",
        "| layers " + ", ".join(map(str, layers)) + " | wall s | per layer s | one process / this |",
        "|---|---|---|---|",
        f"| one process, {n} threads (baseline) | {one:.1f} | {one / len(layers):.1f} | 1.00x |",
        f"| {n} forked workers, 1 thread each | {forked:.1f} | {forked / len(layers):.1f} | {one / forked:.2f}x |",
    ]
    emit("\n".join(lines), args.append)


if __name__ == "__main__":
    main()
