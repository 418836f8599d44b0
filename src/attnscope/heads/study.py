"""The dense-vs-sparse study: two byte-level decoders that differ ONLY in their attention pattern.

Both runs share every training option (preset, overrides, data, optimiser, seed, steps); the sparse
run adds ``attn_pattern``. Each run trains in its own subprocess (so its peak resident memory is
its own: ``ru_maxrss``) through the training lab's trainer; then both final checkpoints are measured
with :func:`attnscope.heads.maps.extract`, and their heads are clustered jointly.

:func:`run_study` trains into ``out_dir`` (``dense/`` and ``sparse/`` run directories, each run's
summary and log) and returns tables: ``summary`` (bits per byte on the held-out split, tokens/s, peak
RSS, params), ``metrics`` (per head, both models), ``clusters`` (joint clustering) and ``examples``
(attention maps for figures). It draws and writes nothing else: ``attnscope heads study`` writes
``summary.csv``, ``heads_metrics.csv``, ``clusters.csv`` (+ silhouettes) and the figures.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

from attnscope.errors import AttnscopeError, InputError

#: the scaled-down default: byte-12l's shape (pre-LN, 8 heads, causal, bytes) at a size a shared
#: 2-core CPU trains in ~10 minutes per model
DEFAULT_TRAIN = dict(
    preset="byte-12l",
    objective="clm",
    data="builtin",
    tokenizer="bytes",
    n_layers=4,
    d_model=128,
    d_ff=512,
    seq_len=256,
    max_seq_len=256,
    batch_size=16,
    steps=250,
    lr=1e-3,
    weight_decay=0.1,
    warmup=30,
    schedule="cosine",
    clip=1.0,
    dropout=0.0,
    seed=0,
    score_every=100,
    checkpoint_every=100,
    eval_windows=16,
    log_every=10,
)


def _train_one(options: dict[str, Any], summary_path: str) -> None:
    """Subprocess body: train one run and record its summary plus peak RSS (MB)."""
    import resource

    from attnscope.tables import atomic_write_json
    from attnscope.training.trainer import TrainConfig, train

    cfg = TrainConfig.from_sources(None, **options)
    summary = train(cfg)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    summary["peak_rss_mb"] = peak_kb / 1024.0
    atomic_write_json(summary_path, summary)


def _trained_steps(run_dir: Path) -> int:
    """The last step a (running) training subprocess logged in its metrics.jsonl (0 before the first)."""
    try:
        with open(run_dir / "metrics.jsonl", "rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - 4096))
            lines = fh.read().splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):  # a line being written, or a torn one
            continue
    return 0


def train_variant(out_dir: Path, variant: str, options: dict[str, Any], log=None,
                  progress: bool = True) -> dict[str, Any]:
    """Train one variant in a subprocess (skipped if its summary exists); returns its summary.

    The subprocess writes its own progress lines into ``OUT/VARIANT_train.log``; here, the steps it
    has logged are shown as this process's progress (``progress=False``: nothing shown).
    """
    from attnscope.progress import progress as progress_bar

    summary_path = out_dir / f"{variant}_train_summary.json"
    if summary_path.is_file():
        return json.loads(summary_path.read_text())
    opts = dict(options, out=str(out_dir / variant), progress=True)  # its stderr is the log: plain lines
    cmd = [sys.executable, "-m", "attnscope.heads.study", json.dumps(opts), str(summary_path)]
    with open(out_dir / f"{variant}_train.log", "w") as fh:
        proc = subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, env=dict(os.environ))
        try:
            with progress_bar(options.get("steps"), f"train {variant}", enabled=progress, unit="steps") as bar:
                while proc.poll() is None:
                    time.sleep(1.0)
                    bar.update(completed=_trained_steps(out_dir / variant))
        finally:
            if proc.poll() is None:  # interrupted here: do not leave the trainer running
                proc.terminate()
                proc.wait()
    if proc.returncode != 0 or not summary_path.is_file():
        raise AttnscopeError(f"training the {variant} model failed; see {out_dir / f'{variant}_train.log'}")
    return json.loads(summary_path.read_text())


def run_study(
    out_dir: str | Path,
    pattern: str = "byte-sparse-8h",
    windows: int = 10,
    train_overrides: dict[str, Any] | None = None,
    log: Callable[[str], None] | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Train dense and sparse into ``out_dir`` (finished runs are reused), measure and cluster their heads.

    Returns ``{"summary", "metrics", "clusters", "examples"}``: the per-variant table, the per-head
    metrics of both models (column ``model`` = variant), the joint :class:`ClusterResult` and, per
    variant, ``{layer: [heads, 96, 96]}`` attention maps of window 0. ``log`` receives a line per
    stage; ``progress`` shows how far each training and measurement is (:mod:`attnscope.progress`;
    each training subprocess also writes its progress lines into its log).
    """
    import pandas as pd

    from .cluster import cluster_heads
    from .maps import extract

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = dict(DEFAULT_TRAIN, **(train_overrides or {}))
    if base.get("attn_pattern"):
        raise InputError("the study sets attn_pattern itself; pass pattern", params="pattern")
    variants = {"dense": dict(base), "sparse": dict(base, attn_pattern=pattern)}
    log = log or (lambda message: None)
    rows, metrics, examples = [], [], {}
    for name, opts in variants.items():
        log(f"training {name} ...")
        s = train_variant(out, name, opts, progress=progress)
        bpb = s.get("eval_loss", float("nan")) / math.log(2)
        rows.append(
            {
                "variant": name,
                "attn_pattern": opts.get("attn_pattern") or "dense",
                "params": s.get("params"),
                "steps": s.get("steps"),
                "tokens": s.get("tokens"),
                "heldout_bits_per_byte": bpb,
                "tokens_per_second": s.get("tokens_per_second"),
                "train_seconds": s.get("train_seconds"),
                "peak_rss_mb": s.get("peak_rss_mb"),
            }
        )
        log(f"measuring heads of {name} ...")
        res = extract(str(out / name), data=base["data"], windows=windows, length=base["seq_len"],
                      batch_size=2, example_layers=tuple(range(base["n_layers"])), example_len=96,
                      progress=progress)
        df = res.metrics.copy()
        df["model"] = name
        metrics.append(df)
        examples[name] = res.examples
    summary = pd.DataFrame(rows)
    allm = pd.concat(metrics, ignore_index=True)
    cl = cluster_heads(allm, k_min=2, k_max=min(8, len(allm) - 1), method="both")
    return {"summary": summary, "metrics": allm, "clusters": cl, "examples": examples}


if __name__ == "__main__":  # the training subprocess of train_variant
    _train_one(json.loads(sys.argv[1]), sys.argv[2])
