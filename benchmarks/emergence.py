"""Benchmark: ``attnscope emergence`` per checkpoint, on the local hub stand-in and on a training run directory.

* hub: a random GPT-NeoX of Pythia-160m's shape (12 layers, d 768, vocab 50304, fp16, one model.safetensors
  of ~325 MB) served by tests/online's hub stand-in (127.0.0.1) at ``--revisions`` branches (one commit
  each, the same weights), swept inline with fresh caches. Reported per revision: wall and CPU seconds,
  bytes read against the file's bytes; beside it ``geometry.score`` of the same model from a local folder
  (the kernel both run).
* run: every checkpoint of a training run directory (``--run DIR``; default: a bert-mini encoder trained
  here for 50 steps with a checkpoint at every step) through the CLI, ``--executor local --workers 2``,
  wall and CPU of the whole command (children included).

    nice python benchmarks/emergence.py --md docs/benchmarks/emergence.md
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "online"))
sys.path.insert(0, str(HERE))


def pythia_160m_files() -> dict[str, bytes]:
    """config.json + model.safetensors of a random GPT-NeoX with Pythia-160m's shape, in fp16."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    torch.manual_seed(0)
    cfg = GPTNeoXConfig(hidden_size=768, num_attention_heads=12, num_hidden_layers=12, intermediate_size=3072,
                        vocab_size=50304, max_position_embeddings=2048, rotary_pct=0.25, torch_dtype="float16")
    with torch.device("cpu"):
        model = GPTNeoXForCausalLM(cfg).half()
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        return {p.name: p.read_bytes() for p in Path(tmp).iterdir() if p.is_file() and p.name != "generation_config.json"}


def cpu_seconds() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def hub_side(n_revisions: int, work: Path) -> list[str]:
    import huggingface_hub.constants as constants
    from hubserver import HubServer, Repo

    from attnscope.emergence import sweep
    from attnscope.geometry import score

    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "ATTNSCOPE_HUB_RANGES"):
        os.environ.pop(var, None)
    os.environ.update(HF_HUB_DISABLE_XET="1", HF_HUB_CACHE=str(work / "hub"), ATTNSCOPE_CACHE=str(work / "cache"))
    constants.HF_HUB_OFFLINE = False
    files = pythia_160m_files()
    size = len(files["model.safetensors"])
    local = work / "local"
    local.mkdir(parents=True)
    for name, blob in files.items():
        (local / name).write_bytes(blob)
    score(str(local))  # imports and first-call costs out of the measurement
    t0, c0 = time.perf_counter(), cpu_seconds()
    score(str(local))
    geo_wall, geo_cpu = time.perf_counter() - t0, cpu_seconds() - c0
    revisions = {f"step{1000 * i}": f"{i + 1:040x}" for i in range(n_revisions)}
    repo = Repo(files, sha=revisions[f"step{1000 * (n_revisions - 1)}"], revisions=revisions,
                trees={sha: files for sha in revisions.values()})
    with HubServer({"bench/pythia-160m": repo}, max_requests=100_000, max_seconds=3600) as server:
        os.environ["HF_ENDPOINT"] = server.url
        t0, c0 = time.perf_counter(), cpu_seconds()
        res = sweep("bench/pythia-160m", work / "out", executor="inline", progress=False)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
        sent = server.bytes_sent()
    assert res.summary.ok, res.summary.failed
    read = int(res.revisions["bytes_read"].sum())
    return [
        "## emergence: per revision on the hub stand-in",
        "",
        f"A random GPT-NeoX of Pythia-160m's shape (12 layers, d 768, fp16, one model.safetensors of "
        f"{size / 1e6:.1f} MB) at {n_revisions} branches of the local hub stand-in (127.0.0.1), swept inline with "
        "fresh caches; this 2-core machine shared with other jobs.",
        "",
        "| | per revision, wall | per revision, CPU | bytes read per revision | of the file |",
        "|---|---|---|---|---|",
        f"| `emergence` (hub, ranges) | {wall / n_revisions:.2f} s | {cpu / n_revisions:.2f} s | "
        f"{read / n_revisions / 1e6:.1f} MB | {100 * read / (n_revisions * size):.1f}% |",
        f"| `geometry.score` (local folder) | {geo_wall:.2f} s | {geo_cpu:.2f} s | | |",
        "",
        f"The server sent {sent / 1e6:.1f} MB in all (the metadata and branch list included). The fused q|k|v "
        "tensor is read whole: q and k alone would be 2/3 of it.",
    ]


def run_side(run: Path | None, work: Path) -> list[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "ATTNSCOPE_QUIET": "1", "PYTHONPATH": str(HERE.parent / "src")}
    cmd = [sys.executable, "-m", "attnscope"]
    if run is None:
        run = work / "bert-mini-50"
        subprocess.run([*cmd, "train", "--preset", "bert-mini", "--objective", "mlm", "--steps", "50",
                        "--checkpoint-every", "1", "--batch-size", "2", "--seq-len", "32", "--eval-windows", "2",
                        "--warmup", "5", "--threads", "1", "--no-progress", "--out", str(run)], env=env, check=True,
                       capture_output=True)
    n = len(list((run / "checkpoints").glob("step-*")))
    rows = []
    for executor in ("inline", "local"):
        out = work / f"out-{executor}"
        t0, c0 = time.perf_counter(), cpu_seconds()
        subprocess.run([*cmd, "emergence", str(run), "--out", str(out), "--executor", executor, "--workers", "2"],
                       env=env, check=True, capture_output=True)
        rows.append(f"| `--executor {executor}` | {time.perf_counter() - t0:.1f} s | {cpu_seconds() - c0:.1f} s |")
    return [
        "## emergence: a training run directory",
        "",
        f"`attnscope emergence RUN --out DIR` on a bert-mini encoder run (4 layers, d 256) with {n} checkpoints "
        "(plus its logged step 0), the whole command (imports, scoring, tables, figures), CPU of it and its "
        "workers; this 2-core machine shared with other jobs.",
        "",
        "| executor | wall | CPU |",
        "|---|---|---|",
        *rows,
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--revisions", type=int, default=4, help="hub branches of the Pythia-160m-shaped model")
    ap.add_argument("--run", type=Path, help="a run directory with checkpoints (default: train one, 50 checkpoints)")
    ap.add_argument("--md", help="also append the section (markdown) to this file")
    args = ap.parse_args()
    from _markdown import emit

    work = Path(tempfile.mkdtemp(prefix="emergence_bench_"))
    try:
        lines = hub_side(args.revisions, work / "hub") + [""] + run_side(args.run, work / "run")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load = os.getloadavg()[0]
    lines += ["", f"Load average at the end: {load:.1f}. Command: `nice python benchmarks/emergence.py --md "
                  "docs/benchmarks/emergence.md`"]
    emit("\n".join(lines) + "\n", args.md)


if __name__ == "__main__":
    main()
