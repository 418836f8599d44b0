"""Benchmark: peak memory and wall time of `attnscope geometry FILE.gguf`, header walk vs the gguf package's reader.

"walk" is the code as it is: the GGUF header is read by :mod:`attnscope.sources.gguf_header`, which
keeps only the scalar metadata and the tensor index and seeks past the tokenizer's arrays. "reader"
is the same run with the header also parsed by ``gguf.GGUFReader`` and held by the source for the
whole run, as a source built on that reader does (it materialises every vocabulary entry, merge
and score as numpy objects). The two run interleaved (walk, reader, walk, ...), each in its own
process; the table gives the median and the range of the peak resident set size (``ru_maxrss``)
and of the wall seconds.

    python benchmarks/gguf_geometry_memory.py smollm2 gemma3-270m [--repeats 3] [--append docs/benchmarks/zoo.md]
"""

from __future__ import annotations

import os
import platform
import tempfile

from _markdown import emit  # benchmarks/: print the section, append it to docs
from _peak import arguments, cli_peak, interleave, ratio, row  # one process per run, runs interleaved
from atlas_speed import _path  # model names -> offline GGUF paths

CONFIGS = ("walk", "reader")


def _with_reader() -> None:
    """Make every GGUFSource also parse its header with gguf.GGUFReader and keep it, as a reader-based source does."""
    from gguf import GGUFReader

    import attnscope.sources.gguf as g

    init = g.GGUFSource.__init__

    def init_with_reader(self, path):
        self._reader = GGUFReader(path, "r")
        init(self, path)

    g.GGUFSource.__init__ = init_with_reader


def one(config: str, source: str) -> dict:
    """Run the geometry CLI in this process; its peak RSS and wall seconds."""
    if config == "reader":
        _with_reader()
    with tempfile.TemporaryDirectory() as out:
        return cli_peak(config, ["geometry", source, "--out", os.path.join(out, "scores.csv")])


def main() -> None:
    a = arguments(one)
    if a is None:  # a child run: its result printed
        return
    load = os.getloadavg()[0]
    lines = ["## geometry on GGUF files: peak memory, header walk and gguf reader", "",
             f"Machine: {platform.node()}, {os.cpu_count()} CPUs.", "",
             "`attnscope geometry FILE --out scores.csv`, each run its own process; median (range) over the runs; "
             "peak RSS is ``ru_maxrss`` in MB (2^20 bytes).", "",
             "| model | header | peak RSS | wall | runs |", "|---|---|---|---|---|"]
    for m in a.models:
        src = _path(m)
        runs = interleave(__file__, CONFIGS, src, a.repeats, m)
        name = os.path.basename(src)
        lines += [row(name, c, runs[c]) for c in CONFIGS]
        lines.append(f"| {name} | reader / walk | **{ratio(runs, 'reader', 'walk'):.2f}x** | | |")
    lines.append(f"\nload average at the start / end: {load:.1f} / {os.getloadavg()[0]:.1f} "
                 f"(on {os.cpu_count()} CPUs: above that, wall times are slowed by other work)")
    emit("\n".join(lines) + "\n", a.append)


if __name__ == "__main__":
    main()
