"""Benchmark: peak memory of `attnscope atlas FILE --out DIR` end to end, now and as it was, in ONE run.

"previous" is the atlas as it was before the memory work of issue 21, rebuilt here by two patches:
GGUF files loaded with their language-model head (``AutoModelForCausalLM``: a second
vocabulary-sized float32 matrix, and a [L, vocab] logits tensor per window) and no
``malloc_trim`` between windows (:mod:`attnscope.heap`). "now" is the code as it is. The two run
interleaved (now, previous, now, ...), each in its own process, because the peak of a run varies by
chance (which arena the allocator picks): every configuration is run ``--repeats`` times and the
table gives the median and the range of the peak resident set size (``ru_maxrss``) and wall seconds.

    python benchmarks/atlas_memory.py smollm2 qwen2.5-0.5b [--repeats 3] [--append docs/benchmarks/atlas.md]
"""

from __future__ import annotations

import os
import platform
import tempfile

from _markdown import emit  # benchmarks/: print the section, append it to docs
from _peak import arguments, cli_peak, interleave, ratio, row  # one process per run, runs interleaved
from atlas_speed import _path  # model names -> offline GGUF paths

CONFIGS = ("now", "previous")


def _previous() -> None:
    """Patch attnscope back to the loader and allocator behaviour before the memory work."""
    import attnscope.heads.load as load
    import attnscope.heap as heap

    heap._malloc_trim = lambda: None

    def load_with_head(p, before_weights=None):  # what _load_gguf did: the causal-LM class, head included
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from attnscope.heads.maps import _as_tokenizer

        tok = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
        if before_weights is not None:
            before_weights(_as_tokenizer(tok, str(p)))
        model = AutoModelForCausalLM.from_pretrained(str(p.parent), gguf_file=p.name, attn_implementation="eager")
        return model.eval(), tok

    load._load_gguf = load_with_head


def one(config: str, source: str) -> dict:
    """Run the atlas CLI in this process; its peak RSS and wall seconds."""
    if config == "previous":
        _previous()
    with tempfile.TemporaryDirectory() as out:
        return cli_peak(config, ["atlas", source, "--out", os.path.join(out, "atlas")])


def main() -> None:
    a = arguments(one)
    if a is None:  # a child run: its result printed
        return
    lines = ["## atlas peak memory, now and previous", "", f"Machine: {platform.node()}, {os.cpu_count()} CPUs.", "",
             "`attnscope atlas FILE --out DIR` with defaults (both probes, 8 windows of 256 tokens), each run its own "
             "process; median (range) over the runs; peak RSS is ``ru_maxrss`` in GiB (2^30 bytes).", "",
             "| model | code | peak RSS | wall | runs |", "|---|---|---|---|---|"]
    for m in a.models:
        src = _path(m)
        runs = interleave(__file__, CONFIGS, src, a.repeats, m)
        name = os.path.basename(src)
        lines += [row(name, c, runs[c], gib=True) for c in CONFIGS]
        lines.append(f"| {name} | previous / now | **{ratio(runs, 'previous', 'now'):.2f}x** | | |")
    lines.append(f"\nload average at the end: {os.getloadavg()[0]:.1f}")
    emit("\n".join(lines) + "\n", a.append)


if __name__ == "__main__":
    main()
