"""Benchmark: `attnscope atlas` on one model, stage by stage, beside `attnscope heads` (the baseline) in ONE run.

Each model is measured in its own subprocess (so its peak resident memory is its own). Stages: loading
the model for maps (GGUF: transformers' loader, dequantised), the random probe, the text probe, the W_qk
geometry (weights only), clustering + correlations; then the baseline, `attnscope heads`' own
``extract`` on the same text windows, on the same loaded model. Wall and CPU seconds per stage (CPU
time is what a loaded shared machine cannot inflate), peak RSS of the process.

    python benchmarks/atlas_speed.py smollm2 qwen2.5-0.5b [--windows 8 --length 256] [--append docs/benchmarks/atlas.md]

Model names: smollm2, gemma3-270m, qwen2.5-0.5b (the offline-real GGUF files; `make real`), or a path.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

from _markdown import emit  # benchmarks/: print the section, append it to docs

MODELS = {"smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct", "gemma3-270m": "google/gemma-3-270m",
          "qwen2.5-0.5b": "Qwen/Qwen2.5-Coder-0.5B-Instruct-AWQ"}


def _path(name: str) -> str:
    if name not in MODELS:
        return name
    from attnscope.atlas.zoo import _source
    from attnscope.zoo.registry import get_entry

    return _source(get_entry(MODELS[name]))


def measure(source: str, windows: int, length: int) -> dict:
    """One model, in this process: seconds (wall, CPU) per stage and peak RSS."""
    import resource

    from attnscope.atlas.build import GEOMETRY, add_clusters, behaviour_columns, behaviour_wide, geometry_rows
    from attnscope.atlas.stats import correlation_table
    from attnscope.geometry import score
    from attnscope.heads.maps import extract, open_model
    from attnscope.heads.probes import run_probes

    stages: dict[str, tuple[float, float, float]] = {}  # wall s, CPU s, peak RSS MB after the stage
    out: dict = {}

    def timed(name, fn):
        w, c = time.perf_counter(), time.process_time()
        out[name] = fn()
        stages[name] = (time.perf_counter() - w, time.process_time() - c,
                        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)

    timed("load", lambda: open_model(source))
    model = out["load"]
    timed("random probe", lambda: run_probes(model, "random", random_windows_n=windows))
    timed("text probe", lambda: run_probes(model, "text", windows=windows, length=length))
    timed("geometry", lambda: geometry_rows(score(source, levels="head"), "decoder" if model.causal else "encoder"))

    def rest():
        import pandas as pd

        t = out["geometry"].merge(behaviour_wide(pd.concat([out["random probe"], out["text probe"]])), on=["layer", "head"])
        t, _ = add_clusters(t, behaviour_columns(t))
        return correlation_table(t, GEOMETRY, behaviour_columns(t), n_boot=2000)

    timed("clusters + correlations", rest)
    timed("baseline: heads extract (text)", lambda: extract(model, windows=windows, length=length))
    return {"source": source, "layers": model.n_layers, "heads": model.n_heads, "windows": windows, "length": length,
            "stages": stages, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def _markdown(results: list[dict]) -> str:
    lines = ["## atlas speed", "", f"Machine: {platform.node()}, {os.cpu_count()} CPUs, "
             f"load average {os.getloadavg()[0]:.1f} at the end.", "",
             "| model | stage | wall s | CPU s | peak RSS after (MB) |", "|---|---|---|---|---|"]
    for r in results:
        name = os.path.basename(r["source"])
        total_w = total_c = 0.0
        for stage, (w, c, rss) in r["stages"].items():
            lines.append(f"| {name} | {stage} | {w:.1f} | {c:.1f} | {rss:.0f} |")
            if not stage.startswith("baseline"):
                total_w, total_c = total_w + w, total_c + c
        base = r["stages"]["baseline: heads extract (text)"]
        lines.append(f"| {name} | **atlas total** | **{total_w:.1f}** | **{total_c:.1f}** | |")
        lines.append(f"| {name} | text probe / heads extract (same windows) | {r['stages']['text probe'][0] / base[0]:.2f}x | "
                     f"{r['stages']['text probe'][1] / base[1]:.2f}x | |")
        lines.append(f"| {name} | peak RSS | {r['peak_rss_mb']:.0f} MB | | |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--windows", type=int, default=8)
    ap.add_argument("--length", type=int, default=256)
    ap.add_argument("--append", default=None, help="Append a markdown section to this file.")
    ap.add_argument("--one", default=None, help=argparse.SUPPRESS)  # the subprocess: measure this path
    a = ap.parse_args()
    if a.one:
        print(json.dumps(measure(a.one, a.windows, a.length)))
        return
    results = []
    for m in a.models:
        cmd = [sys.executable, __file__, "x", "--one", _path(m), "--windows", str(a.windows), "--length", str(a.length)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    emit(_markdown(results), a.append)


if __name__ == "__main__":
    main()
