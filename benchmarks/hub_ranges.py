"""Benchmark: scoring a sharded hub model by byte range (q/k only) against downloading its shards.

A random LLaMA-layout checkpoint (float32, d=384, 8 layers, two layers per shard, MLP width chosen so
that q/k are ~10% of the bytes and every shard holds some) is served by the local hub stand-in of
tests/online (127.0.0.1, the hub's resolve / CDN redirect / Range behaviour). Both sides run in this
process with fresh caches, interleaved, ``--repeats`` times each:

* ``shards``  ``HubSource(ranges=False)``: huggingface_hub downloads every shard that holds q/k,
* ``ranges``  ``HubSource(ranges=True)``: safetensors headers, then only the q/k byte ranges.

Reported: bytes the server sent, HTTP requests, wall time of ``geometry.score``. Then the projection
for the registry's largest entries (bf16): what the shards weigh against their q/k bytes, and the
requests a range read needs (q and k of each layer, plus the CDN redirect and the header of each shard).

    nice python benchmarks/hub_ranges.py --md docs/benchmarks/hub.md
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "online"))

#: architecture facts of the registry's largest entries (config.json of each hub repo)
SHAPES = {
    "meta-llama/Llama-3.1-405B": dict(d=16384, n_q=128, n_kv=8, e=128, layers=126, shard_gb=5.0),
    "meta-llama/Llama-3.1-70B": dict(d=8192, n_q=64, n_kv=8, e=128, layers=80, shard_gb=5.0),
    "meta-llama/Meta-Llama-3-70B": dict(d=8192, n_q=64, n_kv=8, e=128, layers=80, shard_gb=5.0),
    "meta-llama/Llama-2-70b-hf": dict(d=8192, n_q=64, n_kv=8, e=128, layers=80, shard_gb=10.0),
}


def _one(side: str, root: Path) -> tuple[int, int, float]:
    """(bytes sent, requests, seconds) for one fresh-cache scoring run."""
    from attnscope.geometry import score
    from attnscope.sources import open_source

    shutil.rmtree(root, ignore_errors=True)
    os.environ["HF_HUB_CACHE"] = str(root / "hub")
    os.environ["ATTNSCOPE_CACHE"] = str(root / "attnscope")
    SERVER.clear()
    t0 = time.perf_counter()
    src = open_source("bench/llama", ranges=(side == "ranges"))
    score(src)
    src.close()
    return SERVER.bytes_sent(), len(SERVER.log), time.perf_counter() - t0


def projection() -> list[str]:
    from attnscope.zoo.registry import get_entry

    rows = ["| model | params | shards (bf16) | q/k bytes | q/k share | range requests |", "|---|---|---|---|---|---|"]
    for mid, s in SHAPES.items():
        entry = get_entry(mid)
        params = entry.params if entry is not None and entry.params else None
        qk = s["layers"] * (s["n_q"] + s["n_kv"]) * s["e"] * s["d"] * 2
        total = params * 2 if params else None
        n_shards = int(-(-total // (s["shard_gb"] * 1e9))) if total else 0
        rows.append(
            f"| {mid} | {params / 1e9:.1f} B | {total / 1e9:.0f} GB | {qk / 1e9:.1f} GB | "
            f"{100 * qk / total:.1f}% | ~{2 * s['layers'] + 3 * n_shards} |"
            if total
            else f"| {mid} | ? | ? | {qk / 1e9:.1f} GB | ? | {2 * s['layers']}+ |"
        )
    return rows


def main() -> None:
    global SERVER
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--md", type=Path, help="also write the section (markdown) here")
    args = ap.parse_args()
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "ATTNSCOPE_HUB_RANGES"):
        os.environ.pop(var, None)
    os.environ["HF_HUB_DISABLE_XET"] = "1"
    import huggingface_hub.constants as constants
    from hubserver import HubServer, Repo
    from repos import llama_repo, qk_bytes

    constants.HF_HUB_OFFLINE = False
    files = llama_repo(n_layers=8, d=384, n_heads=8, n_kv=8, inter=2048, vocab=1000, layers_per_shard=2,
                       extra_shard=False)
    weights = sum(len(b) for f, b in files.items() if f.endswith(".safetensors"))
    share = qk_bytes(files) / weights
    work = Path(tempfile.mkdtemp(prefix="hub_ranges_"))
    results: dict[str, list[tuple[int, int, float]]] = {"shards": [], "ranges": []}
    with HubServer({"bench/llama": Repo(files, sha="e" * 40)}, max_requests=100_000, max_seconds=3600) as server:
        SERVER = server
        os.environ["HF_ENDPOINT"] = server.url
        _one("ranges", work / "warm")  # imports and first-call costs out of the measurement
        for _ in range(args.repeats):
            for side in ("shards", "ranges"):
                results[side].append(_one(side, work / side))
    shutil.rmtree(work, ignore_errors=True)

    def med(side: str, i: int) -> float:
        return statistics.median(r[i] for r in results[side])

    lines = [
        "## hub: q/k by byte range vs downloading the shards",
        "",
        f"Local hub stand-in on 127.0.0.1 (tests/online/hubserver.py), {len(files) - 3} shards, "
        f"{weights / 1e6:.1f} MB of float32 weights, q/k {100 * share:.1f}% of them and in every shard; "
        f"fresh caches, median of {args.repeats} interleaved runs, this 2-core machine shared with other jobs.",
        "",
        "| side | bytes sent | requests | wall (score) |",
        "|---|---|---|---|",
    ]
    for side in ("shards", "ranges"):
        lines.append(f"| {side} | {med(side, 0) / 1e6:.2f} MB | {med(side, 1):.0f} | {med(side, 2):.2f} s |")
    lines += [
        "",
        f"Ranges send **{med('shards', 0) / med('ranges', 0):.1f}x fewer bytes** "
        f"and take {med('ranges', 2) / med('shards', 2):.2f}x the shards' wall time end to end on loopback, where "
        "bandwidth is nearly free and the extra round trips cost most; on a real link the byte ratio dominates.",
        "",
        "Projected for the registry's largest entries (bf16; shards from the registry's parameter count):",
        "",
        *projection(),
        "",
        "Command: `nice python benchmarks/hub_ranges.py --md docs/benchmarks/hub.md`",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.md is not None:
        from attnscope.tables import atomic_write_text

        atomic_write_text(args.md, text)


SERVER = None

if __name__ == "__main__":
    main()
