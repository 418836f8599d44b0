"""Peak memory of an attnscope command, each configuration in its own process, runs interleaved.

A benchmark script names its configurations and how to set each up in a fresh process; :func:`interleave`
runs ``SCRIPT x --one CONFIG SOURCE`` for every configuration in turn, ``repeats`` times (the peak of a run
varies by chance: which arena the allocator picks), and collects what each child printed as JSON (the
``--one`` branch of the script calls :func:`cli_peak`). :func:`row` is one markdown table row:
median (range) of the peak resident set size (``ru_maxrss``) and of the wall seconds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from typing import Callable


def arguments(one: Callable[[str, str], dict]) -> argparse.Namespace | None:
    """The command line every such script takes (models, ``--repeats``, ``--append``); None after a child's run
    (``--one CONFIG SOURCE``: ``one`` called and its result printed as JSON)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("models", nargs="+")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--append", default=None, help="Append a markdown section to this file.")
    ap.add_argument("--one", nargs=2, default=None, help=argparse.SUPPRESS)  # a child: CONFIG SOURCE
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(*a.one)))
        return None
    return a


def cli_peak(config: str, argv: list[str]) -> dict:
    """Run ``attnscope ARGV`` in this process (output captured); its peak RSS in MB and wall seconds."""
    import contextlib
    import io
    import resource
    import time

    from attnscope.cli import main as cli

    sys.argv = ["attnscope", *argv]
    t = time.perf_counter()
    log = io.StringIO()
    with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        try:
            cli()
        except SystemExit as exc:
            code = exc.code
        else:
            code = 0
    if code:
        raise RuntimeError(f"attnscope {argv[0]} exited {code}: {log.getvalue()[-1500:]}")
    wall = time.perf_counter() - t
    return {"config": config, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "wall_s": wall}


def interleave(script: str, configs: tuple[str, ...], source: str, repeats: int, label: str) -> dict[str, list[dict]]:
    """Every configuration's runs, each ``python SCRIPT x --one CONFIG SOURCE`` in a fresh process."""
    runs: dict[str, list[dict]] = {c: [] for c in configs}
    for _ in range(repeats):
        for c in configs:
            proc = subprocess.run([sys.executable, script, "x", "--one", c, source], capture_output=True, text=True)
            if proc.returncode:
                sys.exit(f"{label} ({c}) failed:\n{proc.stderr[-2000:]}")
            runs[c].append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return runs


def row(name: str, config: str, runs: list[dict], gib: bool = False) -> str:
    """``| name | config | peak (range) | wall (range) | runs |``; peak in MB, or GiB when ``gib``."""
    scale, unit, digits = (1024, "GiB", 2) if gib else (1, "MB", 0)
    peaks = [r["peak_mb"] / scale for r in runs]
    walls = [r["wall_s"] for r in runs]
    wd = 0 if gib else 1
    return (f"| {name} | {config} | {statistics.median(peaks):.{digits}f} {unit} ({min(peaks):.{digits}f}-"
            f"{max(peaks):.{digits}f}) | {statistics.median(walls):.{wd}f} s ({min(walls):.{wd}f}-{max(walls):.{wd}f}) "
            f"| {len(runs)} |")


def ratio(runs: dict[str, list[dict]], over: str, under: str) -> float:
    """Median peak of ``over`` divided by the median peak of ``under``."""
    return statistics.median(r["peak_mb"] for r in runs[over]) / statistics.median(r["peak_mb"] for r in runs[under])
