"""Benchmark: the atlas page with head views on a real model: its size, when it becomes interactive in
Chromium, what the views cost in memory, and the screenshots of docs/atlas.md.

Runs ``attnscope.atlas(MODEL)`` with its defaults (8 text windows of 256 tokens, 8 random windows), writes
``atlas.html`` as the CLI does, then loads it in headless Chromium ``--loads`` times: "interactive" is
``performance.now()`` when a script placed after the page's own scripts runs (the scatter drawn, the head
view ready: the page answers a click from then on), median and range over the loads. The driver script then
clicks a head, a window and a token, and the screenshots are taken of that state (``--shots DIR``).

    python benchmarks/head_view_page.py smollm2 [--loads 3] [--shots docs/atlas_figures] [--cache /tmp/a.pkl]
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "pages"))
from _chromium import drive  # noqa: E402  (tests/pages: the headless-Chromium driver the browser tests use)
from atlas_speed import _path  # noqa: E402  model names -> offline GGUF paths

#: docs screenshot -> (head "layer,head", window, query to pin), for SmolLM2-135M-Instruct: L17H5 (best induction
#: score on text) at " list" of window 3, whose earlier " list" is followed by "("; L16H0 (best previous-token score)
SHOTS = {
    "head_view_induction.png": ("17,5", 2, 150),
    "head_view_previous_token.png": ("16,0", 0, 60),
}

ONLY = r"""
function only(sel){for (const e of document.body.children) if (!e.contains(document.querySelector(sel))) e.style.display = 'none';
  for (const e of document.querySelector(sel).parentElement.children) if (!e.contains(document.querySelector(sel))) e.style.display = 'none';}
"""


def click_script(head: str, window: int, query: int, tab: str = "text", hide: bool = True) -> str:
    """The driver: click the scatter point of ``head``, pick ``window``, pin ``query``, start the heatmap 40 tokens
    before it, 48 tokens wide; ``tab``: the tab shown; ``hide``: hide the rest of the page."""
    return ONLY + rf"""
const t0 = performance.now();
fire(document.querySelector('#atlas-plot circle[data-head="{head}"]'), 'click');
const w = document.querySelector('#atlas-hv .hv-window'); w.value = '{window}'; w.dispatchEvent(new Event('change'));
fire(document.querySelectorAll('#atlas-hv .tok')[{query}], 'click');
const st = document.querySelector('#atlas-hv .hv-start'); st.value = '{max(0, query - 40)}'; st.dispatchEvent(new Event('change'));
const sp = document.querySelector('#atlas-hv .hv-span'); sp.value = '48'; sp.dispatchEvent(new Event('change'));
if ('{tab}' !== 'text') fire(document.querySelector('.atlas-tabs button[data-tab="{tab}"]'), 'click');
const row = document.querySelector('#atlas-hv .hv-row').textContent;
if ({str(hide).lower()}) only('{'#atlas-hv' if tab == 'text' else '#atlas-tab-pattern'}');
out({{t0, row, title: document.querySelector('#atlas-hv .hv-title').textContent}});
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--loads", type=int, default=3)
    ap.add_argument("--shots", default=None, help="Write the docs screenshots into this folder.")
    ap.add_argument("--cache", default=None, help="Keep the atlas result here (pickle) and reuse it when present.")
    a = ap.parse_args()
    import attnscope
    from attnscope.atlas.html import atlas_page

    cache = Path(a.cache) if a.cache else None
    if cache is not None and cache.is_file():
        res, secs = pickle.loads(cache.read_bytes())
    else:
        t = time.perf_counter()
        res = attnscope.atlas(_path(a.model), progress=True)
        secs = time.perf_counter() - t
        if cache is not None:
            cache.write_bytes(pickle.dumps((res, secs)))
    page = atlas_page(res.table, res.correlations, res.info, maps=res.maps, views=res.views)
    v = res.views
    with tempfile.TemporaryDirectory() as tmp:
        timing = "out({t0: performance.now(), read: performance.getEntriesByType('navigation')[0].responseEnd});"
        got = [drive(page, timing, Path(tmp), name=f"load{i}")[0] for i in range(a.loads)]
        loads, reads = [g["t0"] for g in got], [g["read"] for g in got]
        if a.shots:
            out = Path(a.shots)
            out.mkdir(parents=True, exist_ok=True)
            for name, (head, window, query) in SHOTS.items():
                got, _ = drive(page, click_script(head, window, query), Path(tmp), screenshot=out / name,
                               size=(1150, 1320), name=name)
                print(name, got)
            got, _ = drive(page, click_script("17,5", 2, 150, tab="pattern"), Path(tmp),
                           screenshot=out / "head_view_pattern_tab.png", size=(1150, 560), name="pattern")
    mb = len(page.encode()) / 1e6
    print(f"## head views in the atlas page ({res.info['model']})\n")
    print(f"| heads | windows x tokens | keys kept per query | page | views in memory | interactive in Chromium "
          f"(median, range of {a.loads}) | atlas run |")
    print("|---|---|---|---|---|---|---|")
    print(f"| {len(v.heads)} | {v.n_windows} x {v.length} | {'all' if v.exact else v.k} | {mb:.1f} MB | "
          f"{v.nbytes() / 1e6:.1f} MB | {statistics.median(loads) / 1000:.2f} s ({min(loads) / 1000:.2f}-"
          f"{max(loads) / 1000:.2f}) | {secs:.0f} s |")
    print(f"\nThe file itself was read by {statistics.median(reads) / 1000:.2f} s (median). Machine: "
          f"{os.uname().nodename}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the end.")


if __name__ == "__main__":
    main()
