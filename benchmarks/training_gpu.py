"""Training throughput on one CUDA GPU: attnscope's trainer step vs Hugging Face, tokens/s and MFU.

The bert-base shape (12 layers, d_model 768, 12 heads, FFN 3072, vocabulary 30,522) at batch 32 x 512,
bf16 autocast, fused AdamW on both sides:

* mlm: attnscope ``bert-base`` (post-LN)            vs  ``BertForMaskedLM`` (SDPA attention);
* clm: the same-size decoder (pre-LN, like GPT-2)   vs  ``GPT2LMHeadModel`` (SDPA attention).

Our step is the trainer's own: :class:`attnscope.training.trainer.Batch` (masks made on the host,
pinned non-blocking copies), its loss, its optimizer; our model is torch.compiled as ``attnscope train``
compiles it by default on CUDA (``--no-compile``: eager).
Steps of the two sides are interleaved (A B A B ...), each timed between CUDA synchronisations,
after warm-up steps; the median is reported.

MFU = model FLOPs per second / the GPU's bf16 dense peak. Model FLOPs per token = 6 N + 12 L d T
(N: parameters in matrix products, i.e. all but the position and segment embeddings, the tied
output projection counted once; the attention term as in the PaLM paper, T the sequence length). Both sides are
charged the same formula: our mlm step projects only the masked 15% to the vocabulary, so its MFU
counts work it skipped, as a speed it delivers. The peak is looked up by device name
(:data:`PEAK_TFLOPS`) or given with ``--peak-tflops``.

Two more tables (``--only`` picks sections: mfu, sparse, geometry):

* **sparse vs dense training** (``sparse``): the decoder of ``attnscope train --preset bert-base --objective
  clm --n-heads 8 --pos rotary --norm pre --bf16`` at seq ``--sparse-seq`` (8192; a comma list gives one table
  per length, the batch shrinking to keep ``--sparse-batch`` x the first length's tokens per step), dense and with
  ``--attn-pattern byte-sparse-8h``, each as the trainer runs it by default (dense compiled, the pattern
  through FlexAttention) and the other way round; tokens/s (median step after warm-up) and the mean
  loss of the timed steps (same seed, same batches);
* **geometry logging** (``geometry``): ``attnscope train`` itself (bert-base mlm, batch 32 x 512, bf16,
  ``--score-every 100``, 200 steps on the built-in corpus): the share of training time spent scoring.

Exits 2 with one line without CUDA. ``--smoke`` runs the same code at a tiny shape (2 layers, d_model 64,
vocabulary 512, batch 2 x 32) on whatever device is there, CPU included, with a nominal peak: it checks the
script, not the speed (the test suite runs it). Usage::

    python benchmarks/training_gpu.py [--steps 20] [--warmup 5] [--batch 32] [--seq 512] [--no-compile]
                                      [--only mfu,sparse,geometry] [--sparse-seq 8192,16384]
                                      [--peak-tflops 989] [--md docs/benchmarks/training_gpu.md]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch


@dataclass(frozen=True)
class Shape:
    """The model shape both sides are built with."""

    vocab: int = 30522
    layers: int = 12
    heads: int = 12
    d: int = 768
    ff: int = 3072
    max_len: int = 512


BERT_BASE = Shape()
SMOKE = Shape(vocab=512, layers=2, heads=4, d=64, ff=128, max_len=64)

#: bf16 dense tensor-core peak (TFLOP/s) by a substring of torch.cuda.get_device_name(), most specific first
PEAK_TFLOPS = (
    ("H200", 989.0), ("H100 PCIe", 756.0), ("H100", 989.0), ("GH200", 989.0), ("B200", 2250.0),
    ("A100", 312.0), ("L40S", 362.0), ("L4", 121.0), ("A10G", 70.0), ("A10", 125.0), ("RTX 4090", 165.0),
)


def peak_for(name: str) -> float | None:
    return next((tf for key, tf in PEAK_TFLOPS if key in name), None)


def ours(objective: str, shape: Shape, device: torch.device, compile_: bool, **over):
    """(model, what computes the loss: compiled or the model, fused AdamW); ``over``: ModelConfig overrides."""
    from attnscope.training.config import TrainConfig
    from attnscope.training.model import Transformer, preset_config
    from attnscope.training.trainer import _optimizer

    cfg = preset_config("bert-base", **{**dict(vocab_size=shape.vocab, n_layers=shape.layers, n_heads=shape.heads,
                                               d_model=shape.d, d_ff=shape.ff, causal=objective == "clm",
                                               norm="pre" if objective == "clm" else "post",
                                               max_seq_len=shape.max_len), **over})
    model = Transformer(cfg).to(device).train()
    opt = _optimizer(model, TrainConfig(device=str(device), lr=1e-4))
    return model, (torch.compile(model) if compile_ else model), opt


def hf(objective: str, shape: Shape, device: torch.device):
    if objective == "mlm":
        from transformers import BertConfig, BertForMaskedLM

        model = BertForMaskedLM(BertConfig(vocab_size=shape.vocab, hidden_size=shape.d, num_hidden_layers=shape.layers,
                                           num_attention_heads=shape.heads, intermediate_size=shape.ff,
                                           max_position_embeddings=shape.max_len, attn_implementation="sdpa"))
    else:
        from transformers import GPT2Config, GPT2LMHeadModel

        model = GPT2LMHeadModel(GPT2Config(vocab_size=shape.vocab, n_embd=shape.d, n_layer=shape.layers,
                                           n_head=shape.heads, n_inner=shape.ff, n_positions=shape.max_len + 1,
                                           bos_token_id=0, eos_token_id=0, attn_implementation="sdpa"))
    model = model.to(device).train()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)


SKIP = ("pos_emb", "position_embeddings", "wpe", "token_type_embeddings")  # lookups, not matrix products


def matmul_params(model: torch.nn.Module) -> int:
    """Parameters taking part in matrix products: all but position / segment embeddings (shared tensors once;
    the token embedding counts through the tied output projection)."""
    seen, n = set(), 0
    for name, p in model.named_parameters():
        if id(p) in seen or any(s in name for s in SKIP):
            continue
        seen.add(id(p))
        n += p.numel()
    return n


def host_batch(objective: str, shape: Shape, b: int, t: int, gen: torch.Generator):
    from attnscope.training.objectives import make_batch

    w = torch.randint(0, shape.vocab, (b, t + (objective == "clm")), generator=gen)
    return make_batch(objective, w, 103, shape.vocab, gen)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def step_ours(model, opt, x, y, device) -> torch.Tensor:
    from attnscope.training.trainer import Batch

    batch = Batch.on(x, y, device)
    with torch.autocast(device.type, dtype=torch.bfloat16):
        loss = batch.loss(model)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


def step_hf(model, opt, x, y, objective, device) -> None:
    from attnscope.training.trainer import to_device

    with torch.autocast(device.type, dtype=torch.bfloat16):
        if objective == "mlm":
            loss = model(input_ids=to_device(x, device), labels=to_device(y, device)).loss
        else:  # GPT-2 shifts labels itself: give it the unshifted window
            full = to_device(torch.cat([x, y[:, -1:]], dim=1), device)
            loss = model(input_ids=full, labels=full).loss
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def measure(objective: str, args, shape: Shape, device: torch.device, peak: float) -> dict:
    torch.manual_seed(0)
    raw, model, opt = ours(objective, shape, device, args.compile_)
    hmodel, hopt = hf(objective, shape, device)
    gen = torch.Generator().manual_seed(0)
    times: dict[str, list[float]] = {"ours": [], "hf": []}
    for i in range(args.warmup + args.steps):
        x, y = host_batch(objective, shape, args.batch, args.seq, gen)
        for side in ("ours", "hf"):
            sync(device)
            t0 = time.perf_counter()
            if side == "ours":
                step_ours(model, opt, x, y, device)
            else:
                step_hf(hmodel, hopt, x, y, objective, device)
            sync(device)
            if i >= args.warmup:
                times[side].append(time.perf_counter() - t0)
    tokens = args.batch * args.seq
    out = {"objective": objective}
    for side, m in (("ours", raw), ("hf", hmodel)):
        n = matmul_params(m)
        flops_per_token = 6 * n + 12 * shape.layers * shape.d * args.seq
        med = statistics.median(times[side])
        out[side] = {"params": n, "tok_s": tokens / med, "step_ms": 1000 * med,
                     "mfu": tokens / med * flops_per_token / (peak * 1e12)}
    print(f"{objective}: ours {out['ours']['tok_s']:.0f} tokens/s, MFU {100 * out['ours']['mfu']:.1f}%; "
          f"HF {out['hf']['tok_s']:.0f} tokens/s, MFU {100 * out['hf']['mfu']:.1f}%", flush=True)  # a cut run keeps it
    return out


SPARSE_VARIANTS = (("dense", None, True), ("dense", None, False), ("byte-sparse-8h", "byte-sparse-8h", False),
                   ("byte-sparse-8h", "byte-sparse-8h", True))  # (label, pattern, compiled): the defaults first


def sparse_lengths(text: str, batch: int) -> list[tuple[int, int]]:
    """``--sparse-seq`` "8192,16384" -> [(8192, batch), (16384, batch / 2)]: the first length's tokens per step at
    every length (at least one sequence)."""
    try:
        seqs = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        seqs = []
    if not seqs or min(seqs) < 2 or batch < 1:
        raise ValueError(f"--sparse-seq wants lengths >= 2 (e.g. 8192,16384) and --sparse-batch >= 1, not {text!r}")
    return [(t, max(1, batch * seqs[0] // t)) for t in seqs]


def sparse_vs_dense(args, device: torch.device, shape: Shape, t: int, batch: int) -> list[str]:
    """Tokens/s of the clm decoder dense and with byte-sparse-8h at seq ``t``, ``batch`` sequences (one table)."""
    rows = [f"### Sparse vs dense training (clm, {shape.layers} layers, d {shape.d}, 8 heads, rotary, pre-LN, "
            f"seq {t}, batch {batch}, bf16; median of {args.steps} steps after {args.warmup})", "",
            "| attention | torch.compile | tokens/s | vs dense (trainer default) | mean loss of the timed steps |",
            "|---|---|---|---|---|"]
    base = None
    for label, pattern, compile_ in SPARSE_VARIANTS:
        if compile_ and device.type != "cuda":  # compiling on a CPU smoke run would only cost minutes
            continue
        torch.manual_seed(0)
        try:
            raw, model, opt = ours("clm", shape, device, compile_, n_heads=8, pos="rotary", norm="pre",
                                   max_seq_len=t, attn_pattern=pattern)
        except Exception as exc:  # noqa: BLE001 - a compile failure is a result of this row
            rows.append(f"| {label} | {'yes' if compile_ else 'no'} | failed: {type(exc).__name__} | | |")
            continue
        gen = torch.Generator().manual_seed(1)
        if compile_ and pattern:  # as the trainer does: one eager pass keeps the FlexAttention plans, so the
            from attnscope.training.trainer import Batch  # compiled model traces without graph breaks

            x, y = host_batch("clm", shape, batch, t, torch.Generator().manual_seed(2))
            with torch.autocast(device.type, dtype=torch.bfloat16):
                Batch.on(x, y, device).loss(raw).backward()
            raw.zero_grad(set_to_none=True)
        times, losses = [], []
        for i in range(args.warmup + args.steps):
            x, y = host_batch("clm", shape, batch, t, gen)
            sync(device)
            t0 = time.perf_counter()
            loss = step_ours(model, opt, x, y, device)
            sync(device)
            if i >= args.warmup:
                times.append(time.perf_counter() - t0)
                losses.append(loss)
        tok_s = batch * t / statistics.median(times)
        base = base or tok_s
        mean_loss = float(torch.stack(losses).float().mean())
        rows.append(f"| {label} | {'yes' if compile_ else 'no'} | {tok_s:.0f} | {tok_s / base:.2f}x | {mean_loss:.4f} |")
        print(rows[-1], flush=True)  # a run cut short keeps the rows it measured
        del model, opt
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return rows


def geometry_overhead(args, device: torch.device, smoke: bool) -> list[str]:
    """``attnscope train`` with --score-every 100 (smoke: 2): the share of training time spent on geometry."""
    import tempfile

    from attnscope.training.config import TrainConfig
    from attnscope.training.trainer import train

    kw = dict(preset="bert-base", objective="mlm", data="builtin", tokenizer="bytes", steps=200, batch_size=32,
              seq_len=512, score_every=100, bf16=device.type == "cuda", device=str(device), warmup=10,
              checkpoint_every=10**6, eval_windows=1, log_every=50, progress=False)
    if smoke:
        kw.update(steps=4, batch_size=2, seq_len=32, score_every=2, n_layers=1, d_model=32, n_heads=2, d_ff=64)
    with tempfile.TemporaryDirectory(prefix="geometry-overhead-") as out:
        s = train(TrainConfig(out=out, **kw))
        calls = scoring_seconds(Path(out) / "metrics.jsonl")
    first, later = calls[0], calls[1:]
    steady = sum(later) / max(s["train_seconds"], 1e-9)
    return [f"### Geometry logging (attnscope train, {kw['preset']} {kw['objective']}, batch {kw['batch_size']} x "
            f"{kw['seq_len']}, {kw['steps']} steps, --score-every {kw['score_every']})", "",
            "The first scoring (step 0) also pays the device's first use of its kernels; the later ones are what "
            "each --score-every step costs, so the share without the first is the one a long run sees.", "",
            "| training s | geometry s | geometry share | first scoring s | later scorings s (median, n) "
            "| share without the first | compiled | tokens/s |", "|---|---|---|---|---|---|---|---|",
            f"| {s['train_seconds']:.1f} | {s['geometry_seconds']:.2f} | {100 * s['geometry_overhead']:.2f}% "
            f"| {first:.3f} | {statistics.median(later) if later else float('nan'):.3f} ({len(later)}) "
            f"| {100 * steady:.2f}% | {'yes' if s['compiled'] else 'no'} | {s['tokens_per_second']:.0f} |"]


def scoring_seconds(metrics: Path) -> list[float]:
    """The seconds of each geometry scoring of a run, in order, from the running totals in its metrics.jsonl."""
    totals = [rec["geometry_seconds"] for rec in map(json.loads, metrics.read_text().splitlines())
              if "geometry" in rec]
    return [b - a for a, b in zip([0.0, *totals], totals)]


SECTIONS = ("mfu", "sparse", "geometry")


def sections(text: str) -> set[str]:
    """``--only`` "mfu,sparse" -> {"mfu", "sparse"}."""
    return {x.strip() for x in text.split(",") if x.strip()}


def bad_arguments(args) -> str | None:
    """The first argument the run could not use, as one sentence (None: all usable). Checked before the device
    and before any work, so that a bad --steps or an unwritable --md does not cost a benchmark's minutes."""
    for name, value, least in (("--steps", args.steps, 1), ("--warmup", args.warmup, 0), ("--batch", args.batch, 1),
                               ("--seq", args.seq, 2)):
        if value < least:
            return f"{name} must be at least {least}, not {value}"
    if args.peak_tflops is not None and not args.peak_tflops > 0:
        return f"--peak-tflops must be positive, not {args.peak_tflops}"
    only = sections(args.only)
    if not only or only - set(SECTIONS):
        return f"--only takes a comma list of {', '.join(SECTIONS)}; not {args.only!r}"
    try:
        sparse_lengths(args.sparse_seq, args.sparse_batch)
    except ValueError as exc:
        return str(exc)
    from _markdown import unwritable  # benchmarks/, beside this script

    return unwritable(args.md)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--no-compile", dest="compile_", action="store_false",
                    help="run our model eagerly (default: compiled, as attnscope train does on CUDA)")
    ap.add_argument("--only", default="mfu,sparse,geometry", help="comma-separated sections: mfu, sparse, geometry")
    ap.add_argument("--sparse-seq", default="8192",
                    help="sequence lengths of the sparse vs dense tables, comma-separated (one table each)")
    ap.add_argument("--sparse-batch", type=int, default=2, help="sequences per step at the first --sparse-seq")
    ap.add_argument("--peak-tflops", type=float, default=None, help="the GPU's bf16 dense peak (default: by name)")
    ap.add_argument("--md", default=None, help="also write the table to this Markdown file")
    ap.add_argument("--smoke", action="store_true", help="tiny shape on any device (CPU too): checks the script only")
    args = ap.parse_args()
    bad = bad_arguments(args)
    if bad:  # before any device check or work: a typo costs no GPU time
        print(f"training_gpu.py: {bad}", file=sys.stderr)
        return 2
    shape = BERT_BASE
    if args.smoke:  # the code path at a tiny shape, on whatever is here; the numbers mean nothing
        shape, args.batch, args.seq = SMOKE, min(args.batch, 2), min(args.seq, SMOKE.max_len // 2)
        args.sparse_seq, args.sparse_batch = "32,64", 2
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        if device.type == "cpu":
            torch.set_num_threads(1)
            args.compile_ = False  # compiling on a CPU smoke run would only cost minutes
        name = torch.cuda.get_device_name() if device.type == "cuda" else "CPU (smoke run)"
        peak = args.peak_tflops or 1.0
    else:
        if not torch.cuda.is_available():
            print("training_gpu.py: no CUDA GPU here; this benchmark needs one (--smoke runs it tiny on CPU)",
                  file=sys.stderr)
            return 2
        if not torch.cuda.is_bf16_supported():
            print(f"training_gpu.py: {torch.cuda.get_device_name()} has no bf16 support", file=sys.stderr)
            return 2
        name = torch.cuda.get_device_name()
        peak = args.peak_tflops or peak_for(name)
        if not peak or peak <= 0:
            print(f"training_gpu.py: unknown bf16 peak for {name!r}; give --peak-tflops", file=sys.stderr)
            return 2
        torch.backends.cuda.matmul.allow_tf32 = True
        device = torch.device("cuda")
    only = sections(args.only)
    lengths = sparse_lengths(args.sparse_seq, args.sparse_batch)
    lines = []
    if "mfu" in only:
        rows = [measure(obj, args, shape, device, peak) for obj in ("mlm", "clm")]
        lines += [
            "## Training speed on a GPU (attnscope vs Hugging Face, "
            + ("bert-base shape)" if shape == BERT_BASE else "smoke shape: not a measurement)"),
            "",
            f"{name}, torch {torch.__version__}, bf16 autocast, fused AdamW, batch {args.batch} x {args.seq}, "
            f"median of {args.steps} interleaved steps after {args.warmup} warm-up steps"
            f"{', our model torch.compiled' if args.compile_ else ', our model eager'}; MFU against {peak:.0f} TFLOP/s "
            "(6 N + 12 L d T FLOPs per token).",
            "",
            "| objective | ours tokens/s | HF tokens/s | ours / HF | ours MFU | HF MFU |",
            "|---|---|---|---|---|---|",
        ]
        for r in rows:
            o, h = r["ours"], r["hf"]
            lines.append(f"| {r['objective']} | {o['tok_s']:.0f} | {h['tok_s']:.0f} | {o['tok_s'] / h['tok_s']:.2f}x "
                         f"| {100 * o['mfu']:.1f}% | {100 * h['mfu']:.1f}% |")
        lines.append("")
    if "sparse" in only:
        for t, batch in lengths:
            sparse_shape = Shape(vocab=256, layers=shape.layers, heads=8, d=shape.d, ff=shape.ff, max_len=t)
            lines += sparse_vs_dense(args, device, sparse_shape, t, batch) + [""]
    if "geometry" in only:
        lines += geometry_overhead(args, device, args.smoke) + [""]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.md:
        from attnscope.tables import atomic_write_text

        atomic_write_text(args.md, text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
