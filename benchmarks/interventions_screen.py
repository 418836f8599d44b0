"""Benchmark: the screen of the interventions (first order, and the default second order) against the exact sweep, in one run.

For a model (default SmolLM2-135M, all 270 heads x sym, anti, ablate on 4 text windows x 256 tokens and the
random probe), four runs of ``intervene()`` in full precision (float32 products: what an AVX2-only CPU
gets, so the times stand for such a CPU too):

* ``exact=0, screen_samples=0``: the screen at first order alone (clean pass, one forward + one backward per
  text window, the exact behaviour changes of every head): wall and CPU seconds, peak memory (RSS high-water mark);
* ``exact=0``: the default screen (second order: one more backward per label draw);
* ``exact="auto"``: the default (the screen, then the exact pass of the heads it chooses);
* ``exact="all"``: the whole exact sweep (resumable in ``--store``), the reference every estimate is judged by.

Then, per intervention over every head and for both screens: Spearman's rho between the screened and the exact change in loss,
the recall of the exact top 20 (by |change|) within the screen's top 40, the recall of the exact top 10
within the heads the default run measured exactly, and the largest misses with their pattern change.

    OMP_NUM_THREADS=2 python benchmarks/interventions_screen.py smollm2 [--store runs/screen-smollm2]
        [--append docs/benchmarks/interventions_screen.md]
    python benchmarks/interventions_screen.py --shape llama-3-8b --device cuda   # random bf16 weights: the
        screen of all 1024 heads x 3 and the exact pass of the top 11 per intervention, about 32 heads (a GPU; no
        download)
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import time

from _markdown import emit, table as md  # benchmarks/: print the section, append it to docs

MODELS = {"smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct", "gemma3-270m": "google/gemma-3-270m",
          "qwen2.5-0.5b": "Qwen/Qwen2.5-Coder-0.5B-Instruct-AWQ"}
#: Llama-3-8B's shape (random bf16 weights: the time does not depend on them)
SHAPES = {"llama-3-8b": dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                             num_key_value_heads=8, vocab_size=128256, max_position_embeddings=8192,
                             rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=False),
          "random-smollm2": dict(hidden_size=576, intermediate_size=1536, num_hidden_layers=30, num_attention_heads=9,
                                 num_key_value_heads=3, vocab_size=49152, max_position_embeddings=8192,
                                 rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)}


def _path(name: str) -> str:
    if name not in MODELS:
        return name
    from attnscope.atlas.zoo import _source
    from attnscope.zoo.registry import get_entry

    return _source(get_entry(MODELS[name]))


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _timed(label: str, fn):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    row = {"run": label, "wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu,
           "peak_rss_mb": _peak_mb()}
    print(f"measured: {row}", flush=True)  # each row as it is measured (a later failure keeps it)
    return out, row


def agreement_rows(table, auto_heads: set[tuple[int, int]] | None):
    """Per intervention: heads, Spearman rho, recall@20 within the screen's top 40, recall of the exact top 10
    within ``auto_heads``, and the three largest exact effects the screen ranked lowest."""
    from scipy import stats

    out, misses = [], []
    loss = table[(table["measure"] == "loss")].dropna(subset=["delta", "delta_screen"])
    for kind, sub in loss.groupby("intervention", sort=False):
        exact_top = sub.reindex(sub["delta"].abs().sort_values(ascending=False).index)
        screen_rank = sub["delta_screen"].abs().rank(ascending=False)
        top20 = exact_top.head(20)
        in40 = sum(screen_rank[i] <= 40 for i in top20.index)
        top10 = exact_top.head(10)
        row = {"intervention": kind, "heads": len(sub),
               "spearman_rho": float(stats.spearmanr(sub["delta_screen"], sub["delta"]).statistic),
               "pearson_r": float(stats.pearsonr(sub["delta_screen"], sub["delta"]).statistic),
               "recall_top20_in_screen_top40": in40 / min(20, len(sub))}
        if auto_heads is not None:
            row["recall_top10_in_default_exact"] = sum((int(r.layer), int(r.head)) in auto_heads
                                                       for r in top10.itertuples()) / min(10, len(sub))
        out.append(row)
        for r in top10.itertuples():
            misses.append({"intervention": kind, "head": f"L{int(r.layer)}H{int(r.head)}", "exact": r.delta,
                           "screen": r.delta_screen, "screen_rank": int(screen_rank[r.Index]),
                           "pattern_change": r.pattern_change})
    import pandas as pd

    miss = pd.DataFrame(misses)
    if len(miss):
        miss = miss.sort_values("screen_rank", ascending=False).groupby("intervention", sort=False).head(3)
    return pd.DataFrame(out), miss


def run_model(args) -> None:
    import torch

    from attnscope.interventions import intervene, open_subject

    source = _path(args.model)
    opts = dict(interventions=args.interventions, windows=args.windows, length=args.length,
                random_windows=args.random_windows, precision="full", device=args.device, data=args.data,
                controls=False)  # screen against exact: the interventions named, no control beside them
    subject, load = _timed("load", lambda: open_subject(source, device=args.device))
    rows = [load]
    first, t = _timed("screen, first order alone (screen_samples=0)", lambda: intervene(
        subject, exact=0, screen_samples=0, workers=args.workers, **opts))
    rows.append(t)
    screen, t = _timed("screen (default: second order)", lambda: intervene(subject, exact=0, workers=args.workers,
                                                                          **opts))
    rows.append({**t, "note": f"{screen.info['screen_samples']} label draws per window"})
    auto, t = _timed("default (exact=auto)", lambda: intervene(subject, exact="auto", workers=args.workers, **opts))
    rows.append({**t, "exact_heads": auto.info["exact_heads"],
                 "note": "per intervention, the 10% largest screened changes"})
    full, t = _timed("whole exact sweep (exact=all)", lambda: intervene(subject, exact="all", workers=args.workers,
                                                                       store=args.store, **opts))
    rows.append({**t, "exact_heads": full.info["exact_heads"], "note": "resumed from --store" if args.store else ""})
    import pandas as pd

    auto_loss = auto.table[(auto.table["measure"] == "loss") & auto.table["exact"]]
    auto_heads = set(zip(auto_loss["layer"].astype(int), auto_loss["head"].astype(int)))
    key = ["layer", "head", "intervention", "measure"]
    first_order = full.table.drop(columns=["delta_screen"]).merge(first.table[key + ["delta_screen"]], on=key)
    agree1, _miss1 = agreement_rows(first_order, None)
    agree, miss = agreement_rows(full.table, auto_heads)
    agree = pd.concat([agree1.assign(screen="first order"), agree.assign(screen="second order (default)")])
    agree = agree[["screen"] + [c for c in agree.columns if c != "screen"]]
    if args.save:
        full.table.assign(delta_screen_first=first_order.set_index(key).reindex(
            full.table.set_index(key).index)["delta_screen"].to_numpy()).to_parquet(args.save)
    body = (f"Model {args.model} ({full.info['n_layers']} layers x {full.info['n_heads']} heads), interventions "
            f"{args.interventions}, {args.windows} text windows x {full.info['length']} tokens, "
            f"{args.random_windows} random-probe windows; precision full (float32); device {args.device}, "
            f"{torch.get_num_threads()} threads, torch {torch.__version__}, {platform.processor() or platform.machine()}.\n\n"
            "Times (peak RSS is the process's high-water mark so far):\n\n"
            + md(pd.DataFrame(rows), ".1f") + "\n\n"
            "Screen against the exact sweep, per intervention over every head, first order alone and the default "
            "(with the sampled Gauss-Newton second-order term):\n\n"
            + md(agree, ".3f") + "\n\n"
            "The default screen's exact top-10 heads it ranked lowest (screen_rank: its place by |screened "
            "change|):\n\n"
            + md(miss, "+.4f") + "\n")
    emit(f"## Interventions: the screen against the exact sweep ({args.model})\n\n{body}", args.append)


def run_shape(args) -> None:
    """A model of ``--shape`` with random weights in bf16 on ``--device``: the screen of every head x 3, then
    the exact pass of the top ``--exact`` heads, timed, with the device's peak memory."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from attnscope.interventions import intervene
    from attnscope.training.tokenizers import load_tokenizer

    cfg = LlamaConfig(**SHAPES[args.shape], attn_implementation="eager")
    torch.manual_seed(0)
    with torch.device(args.device):
        model = LlamaForCausalLM(cfg).to(torch.bfloat16).eval()
    tok = load_tokenizer("bytes")
    cuda = args.device.startswith("cuda")
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    opts = dict(interventions=args.interventions, windows=args.windows, length=args.length,
                random_windows=args.random_windows, device=args.device, tokenizer=tok, name=args.shape, workers=1)
    screen, t0 = _timed("screen alone (exact=0)", lambda: intervene(model, exact=0, **opts))
    peak0 = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
    top, t1 = _timed(f"screen + exact top {args.exact} per intervention", lambda: intervene(model, exact=args.exact,
                                                                                       **opts))
    peak1 = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
    import pandas as pd

    rows = [{**t0, "device_peak_gib": peak0, "heads": screen.info["heads"]},
            {**t1, "device_peak_gib": peak1, "exact_heads": top.info["exact_heads"]}]
    dev = torch.cuda.get_device_name() if cuda else platform.processor() or platform.machine()
    body = (f"Shape {args.shape} with random bf16 weights ({cfg.num_hidden_layers} x {cfg.num_attention_heads} heads), "
            f"{args.interventions}, {args.windows} text windows x {args.length} tokens, {args.random_windows} random "
            f"windows; device {dev}, torch {torch.__version__}.\n\n" + md(pd.DataFrame(rows), ".1f") + "\n")
    emit(f"## Interventions: the screen on a {args.shape}-shaped model\n\n{body}", args.append)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", nargs="?", default="smollm2", help=f"{', '.join(MODELS)} or a path")
    ap.add_argument("--shape", choices=sorted(SHAPES), help="random weights of this shape instead of a model")
    ap.add_argument("--interventions", default="sym,anti,ablate", help="comma-separated, as atlas --interventions "
                    "(no control is added: the screen is judged against the exact pass of the same interventions)")
    ap.add_argument("--windows", type=int, default=4, help="text windows (loss and behaviour)")
    ap.add_argument("--length", type=int, default=256, help="tokens per text window")
    ap.add_argument("--random-windows", type=int, default=4, help="repeated-random-token windows (behaviour only)")
    ap.add_argument("--device", default="cpu", help="torch device (cuda for --shape llama-3-8b)")
    ap.add_argument("--data", default="builtin", help="text corpora (the runs of docs/atlas.md: builtin)")
    ap.add_argument("--workers", type=int, default=None, help="processes sharing the exact layer passes (default: "
                    "intervene()'s: one per CPU thread with 2 to 4 threads)")
    ap.add_argument("--exact", type=int, default=11, help="--shape: the exact pass of the K largest screened heads of "
                    "each intervention (11: about 32 heads)")
    ap.add_argument("--store", default=None, help="keep the exact sweep's layers here (resumable)")
    ap.add_argument("--save", default=None, help="write the exact sweep's table (screen and exact columns) to this parquet")
    ap.add_argument("--append", default=None, help="append the section to this Markdown file")
    args = ap.parse_args()
    if args.workers is not None and args.workers < 1:
        ap.error("--workers must be at least 1")
    if args.append and not os.access(os.path.dirname(os.path.abspath(args.append)) or ".", os.W_OK):
        ap.error(f"--append {args.append}: its folder cannot be written")
    (run_shape if args.shape else run_model)(args)


if __name__ == "__main__":
    main()
