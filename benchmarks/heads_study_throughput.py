"""Benchmark: training-step throughput of the study's dense and sparse models, interleaved in ONE process.

The study's trainer-reported tokens/s were measured while other jobs shared the machine, at
different times for the two runs; here both models (the study's exact config, differing only in
``attn_pattern``) take turns, step by step, so background load hits them alike. Reports the best and
the median of ``--steps`` timed steps (forward + backward + AdamW) and tokens/s from the median.

    python benchmarks/heads_study_throughput.py [--steps 6] [--batch 16] [--seq-len 256] [--append docs/benchmarks/heads.md]
"""

from __future__ import annotations

import argparse
import statistics
import time

from _markdown import emit  # benchmarks/: print the section, append it to docs


def main() -> None:
    import torch

    from attnscope.training.model import ModelConfig, Transformer

    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--pattern", default="byte-sparse-8h")
    ap.add_argument("--append", default=None, help="Append a markdown section to this file.")
    a = ap.parse_args()

    models, opts = {}, {}
    for name, pat in (("dense", None), ("sparse", a.pattern)):
        torch.manual_seed(0)
        cfg = ModelConfig(n_layers=4, n_heads=8, d_model=128, d_ff=512, vocab_size=256, max_seq_len=a.seq_len,
                          causal=True, norm="pre", dropout=0.0, attn_pattern=pat)
        models[name] = Transformer(cfg)
        opts[name] = torch.optim.AdamW(models[name].parameters(), lr=1e-3)
    x = torch.randint(0, 256, (a.batch, a.seq_len + 1))
    times: dict[str, list[float]] = {n: [] for n in models}
    for step in range(a.steps + 1):  # step 0 warms up
        for name, m in models.items():
            t0 = time.perf_counter()
            logits = m(x[:, :-1])
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 256), x[:, 1:].reshape(-1))
            loss.backward()
            opts[name].step()
            opts[name].zero_grad(set_to_none=True)
            if step:
                times[name].append(time.perf_counter() - t0)
    tok = a.batch * a.seq_len
    rows = {n: (min(t), statistics.median(t), tok / statistics.median(t)) for n, t in times.items()}
    lines = [
        "",
        "**Study models, training-step throughput interleaved in one process** "
        f"(`python benchmarks/heads_study_throughput.py --steps {a.steps} --batch {a.batch} --seq-len {a.seq_len}`; "
        "4 layers x 8 heads, d 128, byte vocabulary, AdamW):",
        "",
        "| model | best step (s) | median step (s) | tokens/s (median) |",
        "|---|---|---|---|",
        *[f"| {n} ({'dense causal SDPA' if n == 'dense' else a.pattern}) | {b:.3f} | {m:.3f} | {t:.0f} |" for n, (b, m, t) in rows.items()],
        "",
        f"sparse / dense median step time: {rows['sparse'][1] / rows['dense'][1]:.2f}",
        "",
    ]
    emit("\n".join(lines), a.append)


if __name__ == "__main__":
    main()
