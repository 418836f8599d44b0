"""Benchmark: what the head views cost an `attnscope atlas` run in peak memory, end to end, in ONE run.

"views" is the CLI as it is (the text windows' top-k keys kept per head, atlas.html with its head views);
"no-views" the same run with the views switched off (``run_probes`` given ``views=None``: the page has the
probe map alone). Each run is its own process, the two configurations interleaved ``--repeats`` times
(:mod:`_peak`); the table gives median (range) of the peak resident set size and the wall seconds, and the
views' own size (:meth:`attnscope.heads.text.TextViews.nbytes`) and the page's, so that the growth can be
set against what the run must hold. Run it with ``PYTHONPATH`` pointing at the code to measure.

    python benchmarks/head_view_memory.py minilm [--repeats 3] [--append docs/benchmarks/atlas.md]

Model names: minilm (all-MiniLM-L6-v2, shipped in the venv), llama-tiny (the bundled 2-layer GGUF), or those of
benchmarks/atlas_speed.py (smollm2, ...), or a path.
"""

from __future__ import annotations

import os
import platform
import statistics
import tempfile

from _markdown import emit  # benchmarks/: print the section, append it to docs
from _peak import arguments, cli_peak, interleave, row  # one process per run, runs interleaved
from atlas_speed import _path  # model names -> offline GGUF paths

CONFIGS = ("views", "no-views")
#: offline-demo models by name (attnscope.zoo.select("offline-demo"))
DEMO = {"minilm": 0, "llama-tiny": 2}


def _source(name: str) -> str:
    if name in DEMO:
        from attnscope.zoo import select

        return select("offline-demo")[DEMO[name]].spec
    return _path(name)


def one(config: str, source: str) -> dict:
    """Run the atlas CLI in this process; its peak RSS, wall seconds, the views' and the page's size."""
    import attnscope.heads.probes as probes
    import attnscope.heads.text as text

    kept: list = []
    real_probes, real_on_layer = probes.run_probes, text.TextViews.on_layer
    if config == "no-views":
        probes.run_probes = lambda *a, **k: real_probes(*a, **{**k, "views": None})
    else:
        def on_layer(self, *a, **k):  # the views of this run, for their size
            if not kept:
                kept.append(self)
            return real_on_layer(self, *a, **k)

        text.TextViews.on_layer = on_layer
    with tempfile.TemporaryDirectory() as out:
        got = cli_peak(config, ["atlas", source, "--out", os.path.join(out, "atlas"), "--threads", "1"])
        got["page_mb"] = os.path.getsize(os.path.join(out, "atlas", "atlas.html")) / 1e6
    got["views_mb"] = kept[0].nbytes() / 1e6 if kept else 0.0
    return got


def main() -> None:
    a = arguments(one)
    if a is None:  # a child run: its result printed
        return
    lines = ["## head views: peak memory of an atlas run with and without them", "",
             f"Machine: {platform.node()}, {os.cpu_count()} CPUs.", "",
             "`attnscope atlas FILE --out DIR --threads 1` with defaults, each run its own process; median (range) "
             "over the runs; peak RSS is ``ru_maxrss`` in MB.", "",
             "| model | code | peak RSS | wall | runs |", "|---|---|---|---|---|"]
    notes = []
    for m in a.models:
        src = _source(m)
        runs = interleave(__file__, CONFIGS, src, a.repeats, m)
        name = m if m in DEMO else os.path.basename(src.rstrip("/"))
        lines += [row(name, c, runs[c]) for c in CONFIGS]
        grow = (statistics.median(r["peak_mb"] for r in runs["views"])
                - statistics.median(r["peak_mb"] for r in runs["no-views"]))
        v = runs["views"][0]
        notes.append(f"{name}: the views add {grow:+.0f} MB to the median peak; they hold {v['views_mb']:.1f} MB, "
                     f"the page is {v['page_mb']:.1f} MB ({runs['no-views'][0]['page_mb']:.1f} MB without them).")
    lines += ["", *notes, f"\nload average at the end: {os.getloadavg()[0]:.1f}"]
    emit("\n".join(lines) + "\n", a.append)


if __name__ == "__main__":
    main()
