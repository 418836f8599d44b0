"""Numbers docs/heads.md states that a test can recompute cheaply (the measured MiniLM numbers come from
``benchmarks/heads_memory.py``)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOC = Path(__file__).resolve().parents[2] / "docs" / "heads.md"


@pytest.mark.parametrize("L", [1024, 4096])
def test_byte_sparse_8h_kept_share_is_what_the_docs_say(L):
    from attnscope.sparse.patterns import load_pattern

    mask = load_pattern("byte-sparse-8h").mask(L, True)  # [h, L, L], True = may attend, causal
    share = mask.sum() / (mask.shape[0] * L * (L + 1) / 2)
    stated = re.search(r"\(([\d.]+)% of the causal\s+entries kept at L = 1024, ([\d.]+)% at L = 4096", DOC.read_text())
    assert stated, "docs/heads.md no longer states the kept shares"
    assert round(100 * share, 1) == float(stated.group(1 if L == 1024 else 2))


def test_the_probe_length_the_docs_state():
    from attnscope.heads import maps

    assert f"A {maps._PROBE_LEN}-token probe forward" in DOC.read_text()


def test_example_maps_crop_the_docs_state():
    import inspect

    from attnscope.cli import heads as cli_heads

    assert "top-left 96 x 96" in DOC.read_text() and "example_len=96" in inspect.getsource(cli_heads).replace(" ", "")


def test_byte_sparse_8h_share_at_the_study_length():
    from attnscope.sparse.patterns import load_pattern

    L = 256
    mask = load_pattern("byte-sparse-8h").mask(L, True)
    share = mask.sum() / (mask.shape[0] * L * (L + 1) / 2)
    stated = re.search(r"at this length the pattern keeps (\d+)% of the causal", " ".join(DOC.read_text().split()))
    assert stated and round(100 * share) == int(stated.group(1))
