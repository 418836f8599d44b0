"""The packed key layout: every kept entry of the pattern appears exactly once in it; its blocks are the ones
FlexAttention's own construction finds; and its block density follows the entry density (the targets)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnscope.sparse import HeadPattern, Pattern, load_pattern
from attnscope.sparse.flex import available
from attnscope.sparse.layout import block_occupancy, key_layout, layout_stats

from ._strategies import head_patterns


#: random patterns (1-4 heads) at lengths up to 60, causal or not, blocks of 4-16: the layouts' test inputs
random_layouts = given(heads=st.lists(head_patterns, min_size=1, max_size=4), L=st.integers(1, 60),
                       causal=st.booleans(), block=st.sampled_from([4, 8, 16]))


def _layout_mask(layout) -> torch.Tensor:
    """The layout's mask_mod on the full grid: [h, L, S + L] bool."""
    fn = layout.mask_mod()
    L, K = layout.L, layout.kv_len
    i = torch.arange(L)[:, None].expand(L, K)
    kv = torch.arange(K)[None, :].expand(L, K)
    return torch.stack([fn(0, torch.full_like(i, h), i, kv) for h in range(layout.n_heads)])


def _counts_on_the_sequence(layout, kept: torch.Tensor) -> np.ndarray:
    """How often each (h, i, j) of the pattern is kept in the layout: segment slots mapped back to their keys."""
    h, L, K = kept.shape
    orig = np.concatenate([layout.pos[:, : layout.S], np.broadcast_to(np.arange(L), (h, L))], axis=1)  # [h, kv]
    counts = np.zeros((h, L, L), dtype=np.int64)
    hh, ii, kk = np.nonzero(kept.numpy())
    np.add.at(counts, (hh, ii, orig[hh, kk]), 1)
    return counts


@settings(max_examples=40, deadline=None)
@random_layouts
def test_every_kept_entry_appears_exactly_once(heads, L, causal, block):
    pat = Pattern(tuple(heads))
    layout = key_layout(pat, L, causal, block)
    assert layout.S % block == 0
    counts = _counts_on_the_sequence(layout, _layout_mask(layout))
    np.testing.assert_array_equal(counts, pat.mask(L, causal).astype(np.int64))


@pytest.mark.skipif(not available(), reason="this torch has no FlexAttention")
@settings(max_examples=30, deadline=None)
@given(heads=st.lists(head_patterns, min_size=1, max_size=3), L=st.integers(1, 70), causal=st.booleans(),
       block=st.sampled_from([8, 16]))
def test_blocks_are_those_flexattention_finds(heads, L, causal, block):
    """Kept blocks equal create_block_mask's on the same mask_mod; blocks marked full are full there too."""
    from torch.nn.attention.flex_attention import create_block_mask

    pat = Pattern(tuple(heads))
    layout = key_layout(pat, L, causal, block)
    kept, full = block_occupancy(layout)
    bm = create_block_mask(layout.mask_mod(), B=None, H=pat.n_heads, Q_LEN=L, KV_LEN=layout.kv_len,
                           device="cpu", BLOCK_SIZE=block)
    dense = bm.to_dense()[0].bool().numpy()  # [h, n, m]: partial or full
    nq, nk = kept.shape[1:]
    np.testing.assert_array_equal(kept, dense[:, :nq, :nk])
    theirs_full = np.zeros_like(full)
    if bm.full_kv_num_blocks is not None:
        for h in range(pat.n_heads):
            for n in range(nq):
                idx = bm.full_kv_indices[0, h, n, : bm.full_kv_num_blocks[0, h, n]].numpy()
                theirs_full[h, n, idx] = True
    assert not (full & ~theirs_full).any()


def test_a_pattern_with_many_shared_keys_stays_in_place():
    """stride 1 keeps every key: packing would only add blocks, so the head is left in place."""
    layout = key_layout(load_pattern("strided:4:1", n_heads=2), 1024, True)
    assert not layout.packed.any() and layout.S == 0
    assert layout_stats(load_pattern("strided:4:1", n_heads=2), 1024, True)["block_density"] == 1.0


# every preset at L >= 4096: block density <= 2 x entry density + the bands' own blocks
PRESETS = [("byte-sparse-8h", None), ("local:8", 8), ("local:128", 8), ("local:1024", 8), ("strided:32:8", 8),
           ("strided:64:16", 8), ("strided:128:128", 8), ("strided:16:2", 8), ("dense", 8)]


@pytest.mark.parametrize("L", [4096, 16384])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("spec, n_heads", PRESETS)
def test_block_density_follows_entry_density(spec, n_heads, L, causal):
    s = layout_stats(load_pattern(spec, n_heads=n_heads), L, causal)
    assert s["block_density"] <= 2 * s["entry_density"] + s["band_block_density"] + 1e-12, s
    assert s["block_density"] <= s["inplace_block_density"] + 1e-12


@pytest.mark.parametrize("L, bound, before", [(4096, 0.20, 0.67), (16384, 0.12, 0.64)])
def test_byte_sparse_8h_targets(L, bound, before):
    s = layout_stats(load_pattern("byte-sparse-8h"), L, True)
    assert s["block_density"] <= bound
    assert abs(s["inplace_block_density"] - before) < 0.01  # the sequence's own order: the measured 67% / 64%
    assert 0.06 < s["entry_density"] < 0.075


def test_a_derived_pattern_file_is_block_sparse(tmp_path):
    """A pattern as `attnscope heads derive` writes it (local windows, global heads as stride + key 0)."""
    heads = [HeadPattern(window=8, positions=(0,)), HeadPattern(window=16), HeadPattern(stride=16, positions=(0,)),
             HeadPattern(window=128, stride=8), HeadPattern(window=32, anchors=(0.0, 0.5))] * 2
    path = Pattern(tuple(heads)).save(tmp_path / "derived.yaml")
    s = layout_stats(load_pattern(str(path)), 4096, True)
    assert s["block_density"] <= 2 * s["entry_density"] + s["band_block_density"]
    assert s["block_density"] < s["inplace_block_density"] / 3


def test_the_density_table_in_the_docs_is_what_the_layout_computes():
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "heads.md").read_text()
    rows = re.findall(r"^\| `([\w:-]+)`[^|]* \| (\d+) \| ([\d.]+)% \| \**([\d.]+)%\** [^|]*\| ([\d.]+)% \|$", doc, re.M)
    assert len(rows) >= 5, "docs/heads.md no longer holds the block-density table"
    for spec, L, entry, block, in_place in rows:
        s = layout_stats(load_pattern(spec, n_heads=8), int(L), True)
        assert [round(100 * s[key], 1) for key in ("entry_density", "block_density", "inplace_block_density")] == \
            [float(entry), float(block), float(in_place)], spec


def test_the_benchmark_prints_the_layout_table(tmp_path):
    """`python benchmarks/sparse_attention.py --parts layout`: every pattern and length, each meeting the target."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    md = tmp_path / "out.md"
    r = subprocess.run([sys.executable, str(root / "benchmarks" / "sparse_attention.py"), "--parts", "layout",
                        "--layout-length", "4096", "--md", str(md)], capture_output=True, text=True, timeout=300,
                       env={"PYTHONPATH": str(root / "src"), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert r.returncode == 0, r.stderr[-2000:]
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in md.read_text().splitlines()
            if line.startswith("| ") and not line.startswith("| pattern")]
    assert len(rows) == 8 and all(row[-1] == "yes" for row in rows)
    byte = next(row for row in rows if row[0] == "byte-sparse-8h")
    assert byte[1:5] == ["4096", "7.1%", "17.0%", "67.0%"]


# ---- the arithmetic mask_mod and the full blocks ---------------------------------------------------------------
def _grid(layout, kind: str, rows: np.ndarray | None = None) -> np.ndarray:
    """The layout's mask_mod of ``kind`` over query rows ``rows`` (all when None) and every key: [h, r, S + L]."""
    fn = layout.mask_mod(kind=kind)
    i = torch.arange(layout.L) if rows is None else torch.from_numpy(rows)
    kv = torch.arange(layout.kv_len)
    ii, kk = i[:, None].expand(len(i), len(kv)), kv[None, :].expand(len(i), len(kv))
    return torch.stack([fn(0, torch.full_like(ii, h), ii, kk) for h in range(layout.n_heads)]).numpy()


@settings(max_examples=40, deadline=None)
@random_layouts
def test_arithmetic_mask_equals_the_table_mask(heads, L, causal, block):
    layout = key_layout(Pattern(tuple(heads)), L, causal, block)
    np.testing.assert_array_equal(_grid(layout, "arith"), _grid(layout, "table"))


MASK_PRESETS = PRESETS + [("strided:4:1", 8), ("strided:8:3", 8)]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("spec, n_heads", MASK_PRESETS)
def test_arithmetic_mask_equals_the_table_mask_on_every_preset(spec, n_heads, causal):
    """Every entry at L 200 (blocks of 16), 8 random rows at L 4096 (blocks of 128: the real layouts)."""
    pat = load_pattern(spec, n_heads=n_heads)
    small = key_layout(pat, 200, causal, 16)
    np.testing.assert_array_equal(_grid(small, "arith"), _grid(small, "table"))
    big = key_layout(pat, 4096, causal)
    rows = np.random.default_rng(0).choice(4096, 8, replace=False)
    np.testing.assert_array_equal(_grid(big, "arith", rows), _grid(big, "table", rows))


def test_many_extra_keys_fall_back_to_the_table_mask():
    from attnscope.sparse.layout import MAX_ARITH_EXTRA

    heads = (HeadPattern(window=2, positions=tuple(range(1, 3 * MAX_ARITH_EXTRA + 6, 3))), HeadPattern(window=4, stride=5))
    layout = key_layout(Pattern(heads), 70, True, 8)
    assert layout.extra.shape[1] > MAX_ARITH_EXTRA
    counts = _counts_on_the_sequence(layout, torch.from_numpy(_grid(layout, "arith")))
    np.testing.assert_array_equal(counts, Pattern(heads).mask(70, True).astype(np.int64))


def test_byte_sparse_8h_mask_reads_no_per_key_table():
    """Its packed heads are window + stride (+ anchors): the arithmetic mask needs neither pos nor inplace."""
    layout = key_layout(load_pattern("byte-sparse-8h"), 1024, True)
    assert not layout.inplace.any() and layout.packed[3:].all()
    fn = layout.mask_mod(kind="arith")
    names = set(fn.__code__.co_freevars)
    assert "pos" not in names and "inplace" not in names
    assert {"pos", "inplace"} <= set(layout.mask_mod(kind="table").__code__.co_freevars)


def _exact_blocks(layout) -> tuple[np.ndarray, np.ndarray]:
    """Blocks with any / every entry kept, from the full mask (the slow reference of block_occupancy)."""
    m = _grid(layout, "table")
    h, B = layout.n_heads, layout.block
    nq, nk = -(-layout.L // B), -(-layout.kv_len // B)
    pad = np.zeros((h, nq * B, nk * B), dtype=bool)
    pad[:, : layout.L, : layout.kv_len] = m
    blocks = pad.reshape(h, nq, B, nk, B)
    return blocks.any((2, 4)), blocks.all((2, 4))


@settings(max_examples=40, deadline=None)
@random_layouts
def test_every_block_whose_entries_are_all_kept_is_marked_full(heads, L, causal, block):
    pat = Pattern(tuple(heads))
    layout = key_layout(pat, L, causal, block)
    kept, full = block_occupancy(layout)
    any_kept, all_kept = _exact_blocks(layout)
    np.testing.assert_array_equal(kept, any_kept)
    np.testing.assert_array_equal(full, all_kept)  # as many full blocks as there can be, none wrongly full


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("spec, n_heads", MASK_PRESETS)
def test_full_block_count_is_exact_on_every_preset(spec, n_heads, causal):
    from attnscope.sparse.layout import block_counts

    pat = load_pattern(spec, n_heads=n_heads)
    for L, block in ((200, 16), (600, 64)):
        any_kept, all_kept = _exact_blocks(key_layout(pat, L, causal, block))
        counts = block_counts(pat, L, causal, block)
        assert counts == {"kept": int(any_kept.sum()), "full": int(all_kept.sum()),
                          "partial": int((any_kept & ~all_kept).sum())}
        s = layout_stats(pat, L, causal, block)
        assert (s["blocks_full"], s["blocks_partial"]) == (counts["full"], counts["partial"])


def test_arrange_puts_each_slots_key_ahead_and_copies_its_index_once():
    """arrange = [the keys each segment slot names | the sequence]; the slot index reaches the device once per
    layout (a host copy in every call would make every attention call wait for the GPU)."""
    from attnscope.sparse import layout as lay

    pat = load_pattern("byte-sparse-8h", n_heads=8)
    layout = key_layout(pat, 512, True)
    assert layout.S > 0
    x = torch.randn(2, 8, 512, 4)
    lay.segment_index.cache_clear()
    out = layout.arrange(x)
    out2 = layout.arrange(x + 1)
    assert lay.segment_index.cache_info().misses == 1 and lay.segment_index.cache_info().hits == 1
    pos = layout.pos[:, : layout.S]
    for h in range(8):
        used = pos[h] >= 0
        np.testing.assert_array_equal(out[:, h, : layout.S][:, used].numpy(), x[:, h, pos[h][used]].numpy())
    torch.testing.assert_close(out[:, :, layout.S :], x)
    torch.testing.assert_close(out2, out + 1)
