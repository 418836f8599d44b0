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

``--compare-baseline REV`` instead times the whole of ``intervene()`` as ``attnscope atlas MODEL
--interventions sym,anti,ablate --threads N`` runs it (N threads: N forked workers), once with the code
of git revision REV (``git archive`` into a temporary directory) and once with this checkout's, in
separate processes, alternating (``--repeat``), and prints each one's wall and CPU seconds, the ratio
and how far the two tables are apart (loss rows relative to each row's 95% interval):

    python benchmarks/interventions.py smollm2 --compare-baseline 554e449 --threads 2 --layers all
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
    ap.add_argument("--compare-baseline", metavar="REV",
                    help="instead: intervene() on --layers ('all': every head) with the code of git revision REV "
                         "against this checkout's, in separate processes, alternating; prints the ratio")
    ap.add_argument("--threads", type=int, default=2, help="--compare-baseline: torch threads (the CLI's --threads)")
    ap.add_argument("--repeat", type=int, default=1, help="--compare-baseline: runs of each, alternating")
    ap.add_argument("--workers", type=int, default=0,
                    help="instead: --layers in one process of N threads against N forked one-thread workers (wall "
                         "seconds, side by side in one run; the last --precision)")
    args = ap.parse_args()
    if args.model in RANDOM and not args.tokenizer:
        ap.error(f"{args.model} needs --tokenizer DIR")
    if args.compare_baseline:
        return compare_baseline(args)

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
        f"{_cpu_class()}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} "
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
        f"windows; torch {torch.__version__}, {_cpu_class()}, load average "
        f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at the end (wall seconds; the workers' time includes "
        "their forks and each one's first pass on a cold heap).",
        "",
        "| layers " + ", ".join(map(str, layers)) + " | wall s | per layer s | one process / this |",
        "|---|---|---|---|",
        f"| one process, {n} threads (baseline) | {one:.1f} | {one / len(layers):.1f} | 1.00x |",
        f"| {n} forked workers, 1 thread each | {forked:.1f} | {forked / len(layers):.1f} | {one / forked:.2f}x |",
    ]
    emit("\n".join(lines), args.append)


#: run in a fresh process with one source tree first on PYTHONPATH: intervene() as the CLI's atlas runs it
_RUN = """
import json, os, resource, sys, time
import torch
torch.set_num_threads({threads})
from attnscope.interventions import intervene
import attnscope
heads = {heads}
w0 = time.perf_counter()
res = intervene({source!r}, interventions="sym,anti,ablate", heads=heads, windows={windows}, length={length},
                random_windows={random_windows}, progress=True)
wall = time.perf_counter() - w0
me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
res.table.to_csv({csv!r}, index=False)
print(json.dumps(dict(wall=wall, cpu=me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime,
                      code=os.path.dirname(attnscope.__file__))))
"""


def compare_baseline(args) -> None:
    """intervene() with git revision ``args.compare_baseline``'s code against this checkout's: wall and CPU
    seconds of each run (separate processes, alternating), the ratio, and the tables' agreement."""
    import json
    import subprocess
    import sys
    import tempfile

    import pandas as pd

    here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    source = _path(args.model)
    with tempfile.TemporaryDirectory(prefix="attnscope-baseline-") as tmp:
        base = os.path.join(tmp, "baseline")
        os.makedirs(base)
        archive = subprocess.run(["git", "-C", here, "archive", args.compare_baseline, "src"], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", base], input=archive, check=True)
        trees = {f"baseline {args.compare_baseline}": os.path.join(base, "src"), "this checkout": os.path.join(here, "src")}
        heads = None
        if args.layers != "all":
            from attnscope.interventions.run import open_subject

            n_heads = open_subject(source).maps.n_heads
            heads = [(int(l), h) for l in args.layers.split(",") for h in range(n_heads)]
        runs: dict[str, list[dict]] = {name: [] for name in trees}
        for rep in range(args.repeat):
            for name, src in trees.items():
                csv = os.path.join(tmp, f"{len(runs[name])}-{name.split()[0]}.csv")
                code = _RUN.format(threads=args.threads, heads=heads, source=source, windows=args.windows,
                                   length=args.length, random_windows=args.random_windows, csv=csv)
                env = {**os.environ, "PYTHONPATH": src}
                print(f"run {rep + 1}/{args.repeat}: {name} ({src})", flush=True)
                out = subprocess.run([sys.executable, "-c", code], env=env, check=True, stdout=subprocess.PIPE,
                                     text=True).stdout
                got = json.loads(out.strip().splitlines()[-1])
                assert os.path.samefile(got["code"], os.path.join(src, "attnscope")), got["code"]
                runs[name].append({**got, "csv": csv})
                print(f"  {got['wall']:.1f} s wall, {got['cpu']:.1f} s CPU", flush=True)
        old_name, new_name = list(trees)
        key = ["layer", "head", "intervention", "measure"]
        a = pd.read_csv(runs[old_name][0]["csv"]).set_index(key).sort_index()
        b = pd.read_csv(runs[new_name][0]["csv"]).set_index(key).sort_index()
    loss = a.index.get_level_values("measure") == "loss"
    err = (a["delta"] - b["delta"]).abs()
    half = (a["ci_high"] - a["ci_low"]) / 2
    best = {name: min(r["wall"] for r in rs) for name, rs in runs.items()}
    cpu = {name: min(r["cpu"] for r in rs) for name, rs in runs.items()}
    import torch

    lines = [
        f"### Interventions against {args.compare_baseline}: {os.path.basename(source)}, "
        f"{'every head' if heads is None else f'layers {args.layers}'} x (sym, anti, ablate)",
        "",
        f"`python benchmarks/interventions.py {args.model} --compare-baseline {args.compare_baseline} --threads "
        f"{args.threads} --layers {args.layers} --repeat {args.repeat}`: `intervene()` as `attnscope atlas "
        f"--interventions sym,anti,ablate --threads {args.threads}` runs it, each in its own process, alternating; "
        f"{args.windows} text windows x {args.length} tokens, {args.random_windows} random-probe windows; torch "
        f"{torch.__version__}, {_cpu_class()}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores at "
        "the end. Best of the runs; CPU seconds include the forked workers'.",
        "",
        "| code | wall s (each run) | CPU s (each run) | wall, baseline / this |",
        "|---|---|---|---|",
        *[f"| {name} | {_each(rs, 'wall')} | {_each(rs, 'cpu')} | {best[old_name] / best[name]:.2f}x |"
          for name, rs in runs.items()],
        "",
        f"Tables: {int(loss.sum())} loss rows, largest |delta difference| {err[loss].max():.2e} nats, at most "
        f"{(err[loss] / half[loss]).max():.3%} of the row's 95% interval half-width; {int((~loss).sum())} behaviour "
        f"rows, largest difference {err[~loss].max():.1e}. Ratio: wall {best[old_name] / best[new_name]:.2f}x, "
        f"CPU {cpu[old_name] / cpu[new_name]:.2f}x.",
    ]
    emit("\n".join(lines), args.append)


def _each(runs: list[dict], clock: str) -> str:
    return ", ".join(f"{r[clock]:.0f}" for r in runs)


def _cpu_class() -> str:
    """The CPU and its widest matrix instructions: AMX, AVX-512 BF16, AVX-512 or AVX2 (what bf16-delta needs)."""
    try:
        flags = next(ln for ln in open("/proc/cpuinfo") if ln.startswith("flags")).split()
        name = next(ln for ln in open("/proc/cpuinfo") if ln.startswith("model name")).split(":", 1)[1].strip()
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()
    cls = ("AMX" if "amx_tile" in flags else "AVX-512 BF16" if "avx512_bf16" in flags else
           "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "no AVX2")
    return f"{name} ({cls})"


if __name__ == "__main__":
    main()
